"""User-facing errors: each carries one line that names the file, key or value at fault."""


class S2STError(Exception):
    """Bad input from the user (config, option, dataset, model). Shown as one line, no traceback."""
