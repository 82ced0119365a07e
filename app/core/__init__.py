"""The core every area uses: configuration, database and schema, migrations, errors, the clock,
the queue's signals and the background-duty loop. It imports no area."""
