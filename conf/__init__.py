"""The project's Hydra configs; a package so that verl's own entry point finds them: `--config-path pkg://dara.conf`."""
