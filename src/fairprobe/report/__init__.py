"""Reports: console tables, report.html (figures, A-D summary, sample browser), Markdown/CSV exports, the CI check."""
