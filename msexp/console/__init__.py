"""What passes between a command and the person at its console, besides its output: the
stop signals they send (`interrupts`), and the library warnings kept off their screen
(`library_warnings`)."""
