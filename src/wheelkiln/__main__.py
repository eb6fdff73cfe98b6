from wheelkiln.cli import main

main()
