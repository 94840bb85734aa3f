"""`python -m specon` is the `specon` command."""

from specon.cli import main

main()
