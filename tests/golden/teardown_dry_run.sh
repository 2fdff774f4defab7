# landfall teardown --project=landfall-sample --region=us-central1: what runs when everything exists, in order.
# `landfall teardown` describes each resource first and skips what is already gone.
# Kept: the enabled APIs, the Firestore database (run records; --delete-data deletes it).

# --- What starts traffic: schedules, the log sink, the bucket notifications
# delete the scheduler job landfall-ingest-sweep
gcloud scheduler jobs delete landfall-ingest-sweep --location=us-central1 --project=landfall-sample --quiet
# delete the scheduler job landfall-reconcile
gcloud scheduler jobs delete landfall-reconcile --location=us-central1 --project=landfall-sample --quiet
# delete the log sink landfall-job-events
gcloud logging sinks delete landfall-job-events --project=landfall-sample --quiet
# delete the notifications of gs://landfall-sample-landfall-landing (a bucket Landfall made)
gcloud storage buckets notifications delete gs://landfall-sample-landfall-landing --project=landfall-sample --quiet

# --- Subscriptions and functions
# delete the subscription landfall-object-events-ingest
gcloud pubsub subscriptions delete landfall-object-events-ingest --project=landfall-sample --quiet
# delete the subscription landfall-training-requests-dispatch
gcloud pubsub subscriptions delete landfall-training-requests-dispatch --project=landfall-sample --quiet
# delete the subscription landfall-job-events-listener
gcloud pubsub subscriptions delete landfall-job-events-listener --project=landfall-sample --quiet
# delete the subscription landfall-ingest-sweep-sweeper
gcloud pubsub subscriptions delete landfall-ingest-sweep-sweeper --project=landfall-sample --quiet
# delete the subscription landfall-reconcile-reconciler
gcloud pubsub subscriptions delete landfall-reconcile-reconciler --project=landfall-sample --quiet
# delete the function landfall-on-object-finalized
gcloud functions delete landfall-on-object-finalized --region=us-central1 --project=landfall-sample --quiet
# delete the function landfall-dispatch
gcloud functions delete landfall-dispatch --region=us-central1 --project=landfall-sample --quiet
# delete the function landfall-on-job-event
gcloud functions delete landfall-on-job-event --region=us-central1 --project=landfall-sample --quiet
# delete the function landfall-sweep-datasets
gcloud functions delete landfall-sweep-datasets --region=us-central1 --project=landfall-sample --quiet
# delete the function landfall-reconcile-runs
gcloud functions delete landfall-reconcile-runs --region=us-central1 --project=landfall-sample --quiet

# --- The dashboard's Cloud Run service (its image goes with the repository, its account with the others)
# delete the dashboard's Cloud Run service landfall-ui
gcloud run services delete landfall-ui --region=us-central1 --project=landfall-sample --quiet

# --- Vertex AI jobs still queued or running, cancelled once no function can submit another
# cancel Landfall's jobs still queued, pending or running in us-central1 (they bill until they end)
# for each ITEM that `gcloud ai custom-jobs list --region=us-central1 --project=landfall-sample '--filter=labels.landfall=run AND state:(JOB_STATE_QUEUED JOB_STATE_PENDING JOB_STATE_RUNNING)' '--format=value(name.basename())'` lists:
gcloud ai custom-jobs cancel ITEM --region=us-central1 --project=landfall-sample
# cancel Landfall's jobs still queued, pending or running in europe-west4 (they bill until they end)
# for each ITEM that `gcloud ai custom-jobs list --region=europe-west4 --project=landfall-sample '--filter=labels.landfall=run AND state:(JOB_STATE_QUEUED JOB_STATE_PENDING JOB_STATE_RUNNING)' '--format=value(name.basename())'` lists:
gcloud ai custom-jobs cancel ITEM --region=europe-west4 --project=landfall-sample

# --- Pub/Sub: dead-letter holds, topics, the schema
# delete the subscription landfall-dead-letter-hold
gcloud pubsub subscriptions delete landfall-dead-letter-hold --project=landfall-sample --quiet
# delete the topic landfall-object-events
gcloud pubsub topics delete landfall-object-events --project=landfall-sample --quiet
# delete the topic landfall-training-requests
gcloud pubsub topics delete landfall-training-requests --project=landfall-sample --quiet
# delete the topic landfall-job-events
gcloud pubsub topics delete landfall-job-events --project=landfall-sample --quiet
# delete the topic landfall-ingest-sweep
gcloud pubsub topics delete landfall-ingest-sweep --project=landfall-sample --quiet
# delete the topic landfall-dead-letter
gcloud pubsub topics delete landfall-dead-letter --project=landfall-sample --quiet
# delete the topic landfall-reconcile
gcloud pubsub topics delete landfall-reconcile --project=landfall-sample --quiet
# delete the topic landfall-run-results
gcloud pubsub topics delete landfall-run-results --project=landfall-sample --quiet
# delete the schema landfall-training-request-v2
gcloud pubsub schemas delete landfall-training-request-v2 --project=landfall-sample --quiet

# --- Project-level grants, then the service accounts
# remove ingest's roles/datastore.user on the project
gcloud projects remove-iam-policy-binding landfall-sample --member=serviceAccount:landfall-ingest@landfall-sample.iam.gserviceaccount.com --role=roles/datastore.user '--condition=expression=resource.name=="projects/landfall-sample/databases/(default)",title=landfall-database,description=Only the Firestore database Landfall keeps its records in'
# remove sweeper's roles/datastore.user on the project
gcloud projects remove-iam-policy-binding landfall-sample --member=serviceAccount:landfall-sweeper@landfall-sample.iam.gserviceaccount.com --role=roles/datastore.user '--condition=expression=resource.name=="projects/landfall-sample/databases/(default)",title=landfall-database,description=Only the Firestore database Landfall keeps its records in'
# remove dispatch's roles/datastore.user on the project
gcloud projects remove-iam-policy-binding landfall-sample --member=serviceAccount:landfall-dispatch@landfall-sample.iam.gserviceaccount.com --role=roles/datastore.user '--condition=expression=resource.name=="projects/landfall-sample/databases/(default)",title=landfall-database,description=Only the Firestore database Landfall keeps its records in'
# remove dispatch's roles/aiplatform.user on the project
gcloud projects remove-iam-policy-binding landfall-sample --member=serviceAccount:landfall-dispatch@landfall-sample.iam.gserviceaccount.com --role=roles/aiplatform.user --condition=None
# remove listener's roles/datastore.user on the project
gcloud projects remove-iam-policy-binding landfall-sample --member=serviceAccount:landfall-listener@landfall-sample.iam.gserviceaccount.com --role=roles/datastore.user '--condition=expression=resource.name=="projects/landfall-sample/databases/(default)",title=landfall-database,description=Only the Firestore database Landfall keeps its records in'
# remove listener's roles/aiplatform.user on the project
gcloud projects remove-iam-policy-binding landfall-sample --member=serviceAccount:landfall-listener@landfall-sample.iam.gserviceaccount.com --role=roles/aiplatform.user --condition=None
# remove reconciler's roles/datastore.user on the project
gcloud projects remove-iam-policy-binding landfall-sample --member=serviceAccount:landfall-reconciler@landfall-sample.iam.gserviceaccount.com --role=roles/datastore.user '--condition=expression=resource.name=="projects/landfall-sample/databases/(default)",title=landfall-database,description=Only the Firestore database Landfall keeps its records in'
# remove reconciler's roles/aiplatform.user on the project
gcloud projects remove-iam-policy-binding landfall-sample --member=serviceAccount:landfall-reconciler@landfall-sample.iam.gserviceaccount.com --role=roles/aiplatform.user --condition=None
# remove builder's roles/logging.logWriter on the project
gcloud projects remove-iam-policy-binding landfall-sample --member=serviceAccount:landfall-builder@landfall-sample.iam.gserviceaccount.com --role=roles/logging.logWriter --condition=None
# remove builder's roles/artifactregistry.writer on the project
gcloud projects remove-iam-policy-binding landfall-sample --member=serviceAccount:landfall-builder@landfall-sample.iam.gserviceaccount.com --role=roles/artifactregistry.writer --condition=None
# remove builder's roles/storage.objectViewer on the project
gcloud projects remove-iam-policy-binding landfall-sample --member=serviceAccount:landfall-builder@landfall-sample.iam.gserviceaccount.com --role=roles/storage.objectViewer '--condition=expression=resource.name.startsWith("projects/_/buckets/landfall-sample_cloudbuild") || resource.name.startsWith("projects/_/buckets/gcf-v2-sources-"),title=landfall-build-sources,description=Only the buckets Cloud Build reads uploaded sources from'
# remove ui's roles/datastore.viewer on the project
gcloud projects remove-iam-policy-binding landfall-sample --member=serviceAccount:landfall-ui@landfall-sample.iam.gserviceaccount.com --role=roles/datastore.viewer '--condition=expression=resource.name=="projects/landfall-sample/databases/(default)",title=landfall-database,description=Only the Firestore database Landfall keeps its records in'
# remove ui's roles/aiplatform.viewer on the project
gcloud projects remove-iam-policy-binding landfall-sample --member=serviceAccount:landfall-ui@landfall-sample.iam.gserviceaccount.com --role=roles/aiplatform.viewer --condition=None
# remove ui's roles/logging.viewer on the project
gcloud projects remove-iam-policy-binding landfall-sample --member=serviceAccount:landfall-ui@landfall-sample.iam.gserviceaccount.com --role=roles/logging.viewer --condition=None
# remove ui's roles/datastore.user on the project
gcloud projects remove-iam-policy-binding landfall-sample --member=serviceAccount:landfall-ui@landfall-sample.iam.gserviceaccount.com --role=roles/datastore.user '--condition=expression=resource.name=="projects/landfall-sample/databases/(default)",title=landfall-database,description=Only the Firestore database Landfall keeps its records in'
# remove ui's roles/aiplatform.user on the project
gcloud projects remove-iam-policy-binding landfall-sample --member=serviceAccount:landfall-ui@landfall-sample.iam.gserviceaccount.com --role=roles/aiplatform.user --condition=None
# delete the service account landfall-ingest@landfall-sample.iam.gserviceaccount.com
gcloud iam service-accounts delete landfall-ingest@landfall-sample.iam.gserviceaccount.com --project=landfall-sample --quiet
# delete the service account landfall-sweeper@landfall-sample.iam.gserviceaccount.com
gcloud iam service-accounts delete landfall-sweeper@landfall-sample.iam.gserviceaccount.com --project=landfall-sample --quiet
# delete the service account landfall-dispatch@landfall-sample.iam.gserviceaccount.com
gcloud iam service-accounts delete landfall-dispatch@landfall-sample.iam.gserviceaccount.com --project=landfall-sample --quiet
# delete the service account landfall-listener@landfall-sample.iam.gserviceaccount.com
gcloud iam service-accounts delete landfall-listener@landfall-sample.iam.gserviceaccount.com --project=landfall-sample --quiet
# delete the service account landfall-reconciler@landfall-sample.iam.gserviceaccount.com
gcloud iam service-accounts delete landfall-reconciler@landfall-sample.iam.gserviceaccount.com --project=landfall-sample --quiet
# delete the service account landfall-trainer@landfall-sample.iam.gserviceaccount.com
gcloud iam service-accounts delete landfall-trainer@landfall-sample.iam.gserviceaccount.com --project=landfall-sample --quiet
# delete the service account landfall-builder@landfall-sample.iam.gserviceaccount.com
gcloud iam service-accounts delete landfall-builder@landfall-sample.iam.gserviceaccount.com --project=landfall-sample --quiet
# delete the service account landfall-invoker@landfall-sample.iam.gserviceaccount.com
gcloud iam service-accounts delete landfall-invoker@landfall-sample.iam.gserviceaccount.com --project=landfall-sample --quiet
# delete the service account landfall-ui@landfall-sample.iam.gserviceaccount.com
gcloud iam service-accounts delete landfall-ui@landfall-sample.iam.gserviceaccount.com --project=landfall-sample --quiet

# --- The trainer images: the repository in each job region
# delete the Docker repository landfall in us-central1 and its images
gcloud artifacts repositories delete landfall --location=us-central1 --project=landfall-sample --quiet
# delete the Docker repository landfall in europe-west4 and its images
gcloud artifacts repositories delete landfall --location=europe-west4 --project=landfall-sample --quiet

# --- Data: empty buckets are deleted; a bucket that holds objects is kept
# delete gs://landfall-sample-landfall-artifacts-us-central1 if it is empty
gcloud storage buckets delete gs://landfall-sample-landfall-artifacts-us-central1 --project=landfall-sample --quiet
# delete gs://landfall-sample-landfall-artifacts-europe-west4 if it is empty
gcloud storage buckets delete gs://landfall-sample-landfall-artifacts-europe-west4 --project=landfall-sample --quiet
# delete gs://landfall-sample-landfall-code if it is empty
gcloud storage buckets delete gs://landfall-sample-landfall-code --project=landfall-sample --quiet
# delete gs://landfall-sample-landfall-landing if it is empty
gcloud storage buckets delete gs://landfall-sample-landfall-landing --project=landfall-sample --quiet
