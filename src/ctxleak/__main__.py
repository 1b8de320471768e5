from ctxleak.cli.app import main

if __name__ == "__main__":  # only when run: importing this module (docs tools do) runs nothing
    main()
