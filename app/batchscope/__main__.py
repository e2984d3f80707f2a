from batchscope.cli import main

raise SystemExit(main())
