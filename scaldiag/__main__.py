from scaldiag.cli import main

raise SystemExit(main())
