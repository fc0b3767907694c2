from infralab.cli import main

raise SystemExit(main())
