"""Reports: the console summary table (and, later, HTML/Markdown/CSV exports)."""
