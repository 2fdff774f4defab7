"""The read side of the CLI and the dashboard: every record they show is read here, through its schema, and nowhere
else in landfall/ (a unit test holds the Firestore and Pub/Sub clients to this package).

    runs          one run, the newest runs under the runs filters, their documents read through the schema
    datasets      the dataset records, one dataset, the version whose request names a run
    models        Model Registry's versions
    teams         each team's use against its limits
    dead_letters  the dead-letter topic's messages and the reconciler's orphans
    measurements  what past runs of a workload measured, for `landfall plan`

A query returns schema types (RunRecord, DatasetVersion, OrphanRecord, TeamUse) or small frozen views of them
(StoredDataset, ReadRuns); the documents as stored where a command prints them (`--json`) or pages on from them.
Failures are CommandErrors that say what could not be read and what to do (landfall/errors.py). The words a page
or a command prints for them are landfall/words.py's. Import the module a command needs (`from landfall.queries.runs
import read_run`): this package imports none of them, so a command pays at start for the reads it makes only.
"""
