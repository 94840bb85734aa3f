"""`python -m specon` is the `specon` command."""

from specon._entry import main

main()
