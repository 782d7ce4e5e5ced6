module github.com/gpurun/gpurun

go 1.24.0

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/opencontainers/runtime-spec v1.3.0 // indirect
	github.com/pelletier/go-toml/v2 v2.4.3 // indirect
	github.com/spf13/cobra v1.10.2 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
)
