"""Names shared by the stores: Optuna study and trial user attributes, MLflow tags.

Studies written by earlier versions use the same strings, so they resume unchanged.
"""

from __future__ import annotations


class StudyKey:
    """User attributes of an Optuna study that msexp created."""

    RETRIES = "msexp.retries"
    TOTAL = "msexp.total"
    OBJECTIVES = "msexp.objectives"
    SWEEP = "msexp.sweep"
    EXPERIMENT = "msexp.experiment"
    UID = "msexp.uid"  # unique per study, even one recreated under the same name
    FINGERPRINT = "msexp.fingerprint"  # written last: marks the study complete
    PARENT_RUN = "mlflow_parent_run_id"
    VERSION = "msexp.version"  # 2 for NAME-v2; a study without it is version 1
    SUPERSEDES = "msexp.supersedes"  # the study this version replaced (--restart)
    SUPERSEDES_RUN = "msexp.supersedes_run"  # that study's MLflow parent run
    SUPERSEDED_BY = "msexp.superseded_by"  # the next version: commands follow it


class TrialKey:
    """User attributes of an Optuna trial."""

    OWNER = "owner"
    HEARTBEAT = "heartbeat"
    STATUS = "status"
    METRICS = "metrics"
    RUN_ID = "mlflow_run_id"
    ERROR = "error"
    GRID_POINT = "grid_point"
    RERUN_OF = "retry_of"  # on a rerun (--retry-failed): the failed trial it copies
    ATTEMPT = "attempt"  # present once an earlier attempt ran (see search.claims)
    PARAMS = "params"  # every param of the trial, as it ran
    CHECKPOINT = "checkpoint"  # the model checkpoint it kept
    FEASIBLE = "feasible"  # whether it kept the sweep's constraints
    MISSING = "missing_objectives"  # objectives a trial that ran to the end did not report
    EPOCHS = "epoch_metrics"  # {"epoch": [1, 2, ...], "eval_accuracy": [...], ...}
    BATCH_STATISTICS = "batch_statistics"  # BatchStatistics: layers, micro_batch, batch, ...


class RunTag:
    """Tags of MLflow runs."""

    ROLE = "msexp.role"
    STUDY = "msexp.study"
    TRIAL = "msexp.trial"
    STATUS = "status"
    ERROR = "error"
    PARENT = "mlflow.parentRunId"
    RESUMED_FROM = "resumed_from_epoch"  # a trial continued from a checkpoint of this epoch
    BEST_CHECKPOINT = "best_checkpoint"  # on the parent run: the best trial's model
    WARM = "warm"  # true: the trial ran on graphs an earlier trial of its worker compiled
    SUPERSEDED_BY = "msexp.superseded_by"  # on a parent run: the study version replacing it
    SUPERSEDES = "msexp.supersedes"  # on a parent run: the study version it replaces
    NOTE = "mlflow.note.content"  # the run's description in the UI
    BATCH_STAT_LAYERS = "batch_stat_layers"  # how many BatchNorm layers the network holds
    DROPOUT_LAYERS = "dropout_layers"  # how many Dropout layers it holds
    SEEDED_DROPOUT = "seeded_dropout_layers"  # of which msexp draws the masks (they split)
    BATCH_STATISTICS = "batch_statistics"  # what they change at the trial's micro_size
    OWNER = "msexp.owner"  # on a tune phase's parent run: the tune process (host:pid)


class TrialEnv:
    """Environment variables a command trial gets (read by `msexp.hooks`)."""

    PARAMS = "MSEXP_TRIAL"  # path of a JSON file with every param of the trial
    OUTPUT_DIR = "MSEXP_OUTPUT_DIR"  # a folder for the trial's outputs and checkpoints
    EVENTS = "MSEXP_EVENTS"  # where `msexp.hooks.report` writes epochs (JSON lines)
    RESUME = "MSEXP_RESUME"  # set on a later attempt: the checkpoint folder to resume from
    PROBE = "MSEXP_PROBE"  # set on a probe (msexp tune): the updates after which it ends
    # every process of a trial process carries it (HOST:PID of the orchestrator/serial), so
    # what a trial started is found and killed even after `setsid` or a dead orchestrator
    MARKER = "MSEXP_TRIAL_ID"
