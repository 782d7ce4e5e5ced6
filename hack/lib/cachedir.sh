# cachedir.sh: sourced by the hack scripts whose result is a directory in a
# cache that only ever appears whole (build-kubernetes.sh,
# build-previous.sh). The build happens in a temporary directory next to
# the result, which is renamed into place when it is complete, so an
# interrupted build leaves no half result and a second run finds it and
# does nothing; concurrent runs serialise on a lock in the cache directory.
#
# The script sets prog (its name, in its stderr lines), cache (the cache
# directory) and dest (the result's directory in it), defines complete
# (true when dest holds everything), and then calls, in this order:
#
#   cache_reuse ANSWER     prints ANSWER and exits when dest is complete
#   cache_lock ANSWER KEY  takes the cache's lock, then does the same (another
#                          run may have finished while this one waited); else
#                          sets begin (the time) and work (a directory
#                          $cache/.build-KEY-XXXXXX, removed on exit)
#   cache_commit ANSWER    renames $work/out to dest, logs the time taken and
#                          prints ANSWER
#
# log and die print "$prog: ..." lines to stderr (die exits 1).

log() { printf '%s: %s\n' "$prog" "$*" >&2; }
die() {
	log "$*"
	exit 1
}

cache_reuse() {
	if complete; then
		echo "$1"
		exit 0
	fi
}

cache_lock() {
	command -v flock >/dev/null || die "flock not found (apt-get install -y util-linux)"
	mkdir -p "$cache"
	exec 9>"$cache/.lock"
	flock 9
	cache_reuse "$1"
	[ ! -e "$dest" ] || die "$dest exists but is not complete: remove it"
	begin=$(date +%s)
	work=$(mktemp -d "$cache/.build-$2-XXXXXX")
	trap 'rm -rf "$work"' EXIT
}

cache_commit() {
	mv "$work/out" "$dest"
	log "$dest ready in $(($(date +%s) - begin)) s"
	echo "$1"
}
