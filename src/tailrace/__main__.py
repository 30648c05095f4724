from tailrace.cli import main

main()
