"""The dashboard (`landfall ui`, docs/ui.md): a read-only web view of runs, plans, datasets, models, teams, dead
letters and orphans over the clients the CLI uses. Its own unit: landfall/ui/requirements.txt."""
