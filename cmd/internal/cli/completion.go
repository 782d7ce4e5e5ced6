package cli

import (
	"io"

	"github.com/spf13/cobra"
)

// newCompletionCmd is `gpurun completion bash|zsh|fish|powershell`: cobra's
// scripts, which ask `gpurun __complete` for the words. (Cobra's own default
// command would write to the stdout of the time it is made.)
func newCompletionCmd(root *cobra.Command) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "completion bash|zsh|fish|powershell",
		Short: "Print the shell completion script for bash, zsh, fish or powershell",
		Long: `Completion prints a script that makes the shell complete gpurun's commands
and flags; the script asks "gpurun __complete" for the words, so it follows
the gpurun on PATH. The .deb and .rpm install the bash, zsh and fish scripts.`,
		Example: `  source <(gpurun completion bash)                                 # this bash only
  gpurun completion bash | sudo tee /etc/bash_completion.d/gpurun  # every new bash
  gpurun completion zsh > "${fpath[1]}/_gpurun"                    # zsh
  gpurun completion fish > ~/.config/fish/completions/gpurun.fish  # fish`,
		Args:              cobra.NoArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
	}
	shells := []struct {
		name, load string
		gen        func(w io.Writer, desc bool) error
	}{
		{"bash", `  source <(gpurun completion bash)
  gpurun completion bash | sudo tee /etc/bash_completion.d/gpurun   # needs the bash-completion package`,
			func(w io.Writer, desc bool) error { return root.GenBashCompletionV2(w, desc) }},
		{"zsh", `  gpurun completion zsh > "${fpath[1]}/_gpurun"   # then start a new shell (compinit must be on)`,
			func(w io.Writer, desc bool) error {
				if desc {
					return root.GenZshCompletion(w)
				}
				return root.GenZshCompletionNoDesc(w)
			}},
		{"fish", `  gpurun completion fish > ~/.config/fish/completions/gpurun.fish`,
			func(w io.Writer, desc bool) error { return root.GenFishCompletion(w, desc) }},
		{"powershell", `  gpurun completion powershell | Out-String | Invoke-Expression`,
			func(w io.Writer, desc bool) error {
				if desc {
					return root.GenPowerShellCompletionWithDesc(w)
				}
				return root.GenPowerShellCompletion(w)
			}},
	}
	for _, sh := range shells {
		var noDesc bool
		sub := &cobra.Command{
			Use:               sh.name,
			Short:             "Print the completion script for " + sh.name,
			Example:           sh.load,
			Args:              cobra.NoArgs,
			ValidArgsFunction: cobra.NoFileCompletions,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return sh.gen(cmd.OutOrStdout(), !noDesc)
			},
		}
		sub.Flags().BoolVar(&noDesc, "no-descriptions", false, "complete without the commands' descriptions")
		cmd.AddCommand(sub)
	}
	return cmd
}
