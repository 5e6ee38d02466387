"""`python -m strongroom.chaos`: run the chaos scenarios and print the table."""

from strongroom.chaos.runner import main

main()
