// Package runargs reads the arguments of `docker run` (everything after
// "run") the way the docker CLI does, only to learn what the user asked for:
// the image, the command, and the flags that matter to gpurun (GPUs, runtime,
// environment, devices, /dev/shm size and mounts, IPC mode, memory limit).
//
// It never rewrites or reorders the arguments. gpurun execs the real docker
// CLI with the user's arguments unchanged and one flag added right after
// "run"; since docker's last --shm-size wins, a user's own --shm-size still
// takes precedence.
//
// Parsing is spf13/pflag's, the flag parser of the docker CLI itself: Parse
// registers every flag of `docker run` in a pflag.FlagSet, with docker's
// value types and aliases, and lets pflag read the arguments. As in docker's
// run command the FlagSet does not intersperse: flags are read until the
// first argument that is not a flag, which is the image; everything after it
// is the container's command, even when it looks like a flag. The flag table
// is the union of the flags accepted by docker CLI 20.10 through 29.x, hidden
// aliases included (see [Flags]). So, as with docker:
//
//   - a flag that takes a value takes the next argument even when it starts
//     with "-" ("-e -x" sets the variable "-x"; "--entrypoint --foo" sets the
//     entrypoint "--foo");
//   - boolean flags never take the next argument ("--rm false" runs the image
//     "false"); they accept "--rm=false" and "-d=false";
//   - short flags cluster ("-itd"); a value-taking short flag in a cluster takes
//     the rest of it ("-p8080:80", "-dp8080:80", "-e=X" sets "X", "-e=" sets
//     "=" which docker then rejects);
//   - "--" ends the flags; the argument after it is the image even if it
//     starts with "-";
//   - a short-flag group starting with "test." is silently ignored ("-test.v",
//     "-itest.v" is "-i"), a quirk pflag keeps for `go test` flags;
//   - "-" alone and "" are not flags: they are taken as the image;
//   - a repeated flag of one of docker's list types ("-e", "-v", "--gpus")
//     adds a value; of the others, the last value wins ("--shm-size");
//   - numbers and durations must be ones ("--cpu-shares x" is an error).
//     Values of docker's own types (sizes, CPU counts, IP addresses, mount
//     specs ...) are docker's to check, except that an -e needs a name.
//
// Parse errors (unknown flag, missing value, a value of the wrong type, an -e
// with an empty name) are returned as *FlagError; a missing image as
// ErrNoImage. In both cases the caller should exec docker unchanged and let
// it print its own error.
package runargs
