"""`landfall deploy` / `landfall teardown`: deploy/topology.toml rendered into ordered gcloud commands.

- config.py reads the [gcp] tables (function sizes, service accounts and their grants, APIs) and the delivery
  policy of each subscription.
- plan.py turns topology + config into the ordered Steps of a deployment, teardown.py into those of a teardown;
  iam.py renders grants.
- steps.py is the Step record, the facts only a live project knows (its number, a function's URL, the log sink's
  writer identity) and the dry-run text.
- bundles.py stages each function's source bundle and the trainer's build context under .landfall/deploy/.
- execute.py runs a plan through gcloud: describe first, then create or update, so a re-run converges.
"""
