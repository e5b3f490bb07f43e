"""`python -m fairprobe.cli`: the same as the `fairprobe` command."""

from fairprobe.cli import main

main()
