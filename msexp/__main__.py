from msexp.cli import console_main

console_main()
