"""Console scripts (each module's main(argv) returns an exit code)."""
