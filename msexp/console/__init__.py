"""What passes between a command and the person at its console, besides its output: the
stop signals they send (`interrupts`), the library warnings kept off their screen
(`library_warnings`), the commands msexp's messages suggest (`hints`), and where log
records go (`own_log`)."""
