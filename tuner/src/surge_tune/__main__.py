from surge_tune.cli import main

raise SystemExit(main())
