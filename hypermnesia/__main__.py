from hypermnesia.cli import main

main()
