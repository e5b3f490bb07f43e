"""`python -m fairprobe` runs the command line, like the `fairprobe` script."""

from fairprobe.cli import main

main()
