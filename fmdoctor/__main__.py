from fmdoctor.cli.main import run

run()
