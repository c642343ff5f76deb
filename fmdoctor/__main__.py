from fmdoctor.cli.main import main

raise SystemExit(main())
