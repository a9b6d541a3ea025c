from export.cli import main

main()
