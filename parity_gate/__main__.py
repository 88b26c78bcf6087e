from parity_gate.cli import main

raise SystemExit(main())
