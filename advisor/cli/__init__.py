"""The `advisor` command. It only orchestrates: each stage lives in its own module.

Its modules: `entry` (main: the process readied, the command run, errors as exit statuses),
`parser` (the command line), `arguments` (the config a command names), `commands` (one function
a command), `schedule` (the crontab line of `advisor schedule`) and `progress` (lines and a live
bar). The clock starts first (`started`), before anything heavy is imported.
"""

from advisor.cli.arguments import (
    SCRIPT_COMMANDS,
    config_argument,
    config_of,
    split_script_command,
)
from advisor.cli.commands import (
    EXIT_BASELINE_FAILED,
    RANKING_FIELDS,
    RISK_WORDS,
    STARTED,
    baseline_failed,
    check_runs,
    load_evidence,
    print_session,
    printable,
    publish,
    ranking,
    ranking_from_runs,
    recipe_table,
    run_diagnose,
    run_optimize,
    run_recipes,
    run_report,
    run_retune,
    run_schema,
    run_ui,
    run_worker,
    say,
    session_stamp,
    write_report_page,
)
from advisor.cli.entry import (
    interrupted,
    main,
    raised_by_interrupt,
    run,
    stop_on_signals,
    warm_up_for,
)
from advisor.cli.parser import (
    EXAMPLES,
    EXIT_STATUSES,
    build_parser,
    epilog,
    positive,
    version,
)
from advisor.cli.progress import (
    LiveBar,
    progress_printer,
)
from advisor.cli.schedule import (
    CRON_MARK,
    cron_line,
    run_schedule,
)
from advisor.cli.started import (
    COMMAND_STARTED,
)

__all__ = [
    "COMMAND_STARTED",
    "config_argument",
    "config_of",
    "LiveBar",
    "progress_printer",
    "CRON_MARK",
    "cron_line",
    "run_schedule",
    "EXIT_BASELINE_FAILED",
    "RANKING_FIELDS",
    "RISK_WORDS",
    "STARTED",
    "baseline_failed",
    "check_runs",
    "load_evidence",
    "print_session",
    "printable",
    "publish",
    "ranking",
    "ranking_from_runs",
    "recipe_table",
    "run_diagnose",
    "run_optimize",
    "run_recipes",
    "run_report",
    "run_retune",
    "run_schema",
    "run_ui",
    "run_worker",
    "say",
    "session_stamp",
    "write_report_page",
    "EXAMPLES",
    "EXIT_STATUSES",
    "SCRIPT_COMMANDS",
    "build_parser",
    "epilog",
    "positive",
    "split_script_command",
    "version",
    "interrupted",
    "main",
    "raised_by_interrupt",
    "run",
    "stop_on_signals",
    "warm_up_for",
]
