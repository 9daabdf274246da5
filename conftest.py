# Repo-level pytest set-up: the plugin's own tests drive real pytest sessions through pytester.
pytest_plugins = ["pytester"]
