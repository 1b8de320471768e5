from ctxleak.cli.app import main

main()
