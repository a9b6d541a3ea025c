"""What every command line shares: `-q`/`-v` logging, typed settings, exit statuses."""
