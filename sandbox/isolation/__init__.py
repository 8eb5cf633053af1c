"""The isolation layers' mechanisms, used by the execution room: thin Linux calls (namespaces, mounts, prctl,
process sweeps: `linux`), the seccomp syscall filter (`seccomp`), and which request file paths are accepted and
how absolute ones are bind-mounted into a run (`file_paths`). What each layer gives and lacks is listed in
`sandbox.execution.pool` and docs/sandbox.md. These modules load into every zygote: keep them lean."""
