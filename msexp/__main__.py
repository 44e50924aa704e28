from msexp.cli import app

app(prog_name="msexp")
