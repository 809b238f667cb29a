"""What run folders say: results, tables and their Markdown, the generated status, `lra status`,
plots, a run's summary and diff, the ledger of paper rows, and a dry run's description.
May import: lra.runs, lra.machine, lra.base, lra.errors, and lra.tasks / lra.models /
lra.configs."""
