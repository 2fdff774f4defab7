# landfall deploy --project=landfall-sample --region=us-central1: what runs on an empty project, in order.
# Run from the repository root: --source, --env-vars-file and --definition-file name staged files.
# `landfall deploy` describes each resource first and updates it, or leaves it alone, when it exists;
# so a second run converges. Grants (add-iam-policy-binding) are idempotent as they are.
# the project number: 123456789012 here; when deploying, what `gcloud projects describe landfall-sample '--format=value(projectNumber)'` prints.
# the log sink's writer identity: serviceAccount:service-123456789012@gcp-sa-logging.iam.gserviceaccount.com here; when deploying, what `gcloud logging sinks describe landfall-job-events --project=landfall-sample '--format=value(writerIdentity)'` prints.
# the URL of landfall-on-object-finalized: https://us-central1-landfall-sample.cloudfunctions.net/landfall-on-object-finalized here; when deploying, what `gcloud functions describe landfall-on-object-finalized --region=us-central1 --project=landfall-sample '--format=value(url)'` prints.
# the URL of landfall-dispatch: https://us-central1-landfall-sample.cloudfunctions.net/landfall-dispatch here; when deploying, what `gcloud functions describe landfall-dispatch --region=us-central1 --project=landfall-sample '--format=value(url)'` prints.
# the URL of landfall-on-job-event: https://us-central1-landfall-sample.cloudfunctions.net/landfall-on-job-event here; when deploying, what `gcloud functions describe landfall-on-job-event --region=us-central1 --project=landfall-sample '--format=value(url)'` prints.
# the URL of landfall-sweep-datasets: https://us-central1-landfall-sample.cloudfunctions.net/landfall-sweep-datasets here; when deploying, what `gcloud functions describe landfall-sweep-datasets --region=us-central1 --project=landfall-sample '--format=value(url)'` prints.
# the URL of landfall-reconcile-runs: https://us-central1-landfall-sample.cloudfunctions.net/landfall-reconcile-runs here; when deploying, what `gcloud functions describe landfall-reconcile-runs --region=us-central1 --project=landfall-sample '--format=value(url)'` prints.

# --- APIs
# enable the APIs Landfall uses
gcloud services enable serviceusage.googleapis.com iam.googleapis.com cloudresourcemanager.googleapis.com cloudfunctions.googleapis.com run.googleapis.com cloudbuild.googleapis.com artifactregistry.googleapis.com pubsub.googleapis.com storage.googleapis.com firestore.googleapis.com aiplatform.googleapis.com logging.googleapis.com cloudscheduler.googleapis.com compute.googleapis.com --project=landfall-sample

# --- Firestore (native mode) and the composite indexes the CLI's queries need
# create the Firestore database (default) in us-central1
gcloud firestore databases create '--database=(default)' --location=us-central1 --type=firestore-native --project=landfall-sample
# create the composite index on runs (state ascending, created_at descending)
gcloud firestore indexes composite create --collection-group=runs --query-scope=collection --field-config=field-path=state,order=ascending --field-config=field-path=created_at,order=descending '--database=(default)' --async --project=landfall-sample
# create the composite index on runs (request.dataset.uri ascending, created_at descending)
gcloud firestore indexes composite create --collection-group=runs --query-scope=collection --field-config=field-path=request.dataset.uri,order=ascending --field-config=field-path=created_at,order=descending '--database=(default)' --async --project=landfall-sample
# create the composite index on runs (state ascending, request.dataset.uri ascending, created_at descending)
gcloud firestore indexes composite create --collection-group=runs --query-scope=collection --field-config=field-path=state,order=ascending --field-config=field-path=request.dataset.uri,order=ascending --field-config=field-path=created_at,order=descending '--database=(default)' --async --project=landfall-sample
# create the composite index on runs (team.name ascending, created_at descending)
gcloud firestore indexes composite create --collection-group=runs --query-scope=collection --field-config=field-path=team.name,order=ascending --field-config=field-path=created_at,order=descending '--database=(default)' --async --project=landfall-sample
# create the composite index on runs (state ascending, team.name ascending, created_at descending)
gcloud firestore indexes composite create --collection-group=runs --query-scope=collection --field-config=field-path=state,order=ascending --field-config=field-path=team.name,order=ascending --field-config=field-path=created_at,order=descending '--database=(default)' --async --project=landfall-sample
# create the composite index on runs (request.dataset.uri ascending, team.name ascending, created_at descending)
gcloud firestore indexes composite create --collection-group=runs --query-scope=collection --field-config=field-path=request.dataset.uri,order=ascending --field-config=field-path=team.name,order=ascending --field-config=field-path=created_at,order=descending '--database=(default)' --async --project=landfall-sample
# create the composite index on runs (state ascending, request.dataset.uri ascending, team.name ascending, created_at descending)
gcloud firestore indexes composite create --collection-group=runs --query-scope=collection --field-config=field-path=state,order=ascending --field-config=field-path=request.dataset.uri,order=ascending --field-config=field-path=team.name,order=ascending --field-config=field-path=created_at,order=descending '--database=(default)' --async --project=landfall-sample
# create the composite index on runs (state ascending, team.name ascending, submission.waiting.since ascending)
gcloud firestore indexes composite create --collection-group=runs --query-scope=collection --field-config=field-path=state,order=ascending --field-config=field-path=team.name,order=ascending --field-config=field-path=submission.waiting.since,order=ascending '--database=(default)' --async --project=landfall-sample
# create the composite index on datasets (status ascending, updated_at descending)
gcloud firestore indexes composite create --collection-group=datasets --query-scope=collection --field-config=field-path=status,order=ascending --field-config=field-path=updated_at,order=descending '--database=(default)' --async --project=landfall-sample

# --- Service accounts: one per function, one for training jobs, one that invokes the functions
# create the service account landfall-ingest@landfall-sample.iam.gserviceaccount.com
gcloud iam service-accounts create landfall-ingest '--display-name=Landfall ingest' '--description=Runs on_object_finalized: reads the landing bucket, keeps dataset records, publishes TrainingRequests.' --project=landfall-sample
# create the service account landfall-sweeper@landfall-sample.iam.gserviceaccount.com
gcloud iam service-accounts create landfall-sweeper '--display-name=Landfall sweeper' '--description=Runs sweep_datasets: closes quiet-period datasets, as ingest does.' --project=landfall-sample
# create the service account landfall-dispatch@landfall-sample.iam.gserviceaccount.com
gcloud iam service-accounts create landfall-dispatch '--display-name=Landfall dispatch' '--description=Runs dispatch: records runs, checks the dataset holds data (and its label column) and records the digest of the code a run names, writes the dataset listing that runs of own code read under runs/, submits Vertex AI CustomJobs that run as the trainer account.' --project=landfall-sample
# create the service account landfall-listener@landfall-sample.iam.gserviceaccount.com
gcloud iam service-accounts create landfall-listener '--display-name=Landfall listener' '--description=Runs on_job_event: re-reads jobs, records their state and the metrics the trainer wrote; resubmits on capacity.' --project=landfall-sample
# create the service account landfall-reconciler@landfall-sample.iam.gserviceaccount.com
gcloud iam service-accounts create landfall-reconciler '--display-name=Landfall reconciler' '--description=Runs reconcile_runs: records jobs that ended unheard, adopts stuck runs (checking their dataset as dispatch does), retries waiting ones, cancels jobs and orphans, republishes lost requests.' --project=landfall-sample
# create the service account landfall-trainer@landfall-sample.iam.gserviceaccount.com
gcloud iam service-accounts create landfall-trainer '--display-name=Landfall trainer' '--description=Identity of the Vertex AI training replicas: reads datasets and the code bucket, writes checkpoints and models.' --project=landfall-sample
# create the service account landfall-builder@landfall-sample.iam.gserviceaccount.com
gcloud iam service-accounts create landfall-builder '--display-name=Landfall builder' '--description=Runs the Cloud Build builds: the trainer and dashboard images and every function'"'"'s container.' --project=landfall-sample
# create the service account landfall-invoker@landfall-sample.iam.gserviceaccount.com
gcloud iam service-accounts create landfall-invoker '--display-name=Landfall invoker' '--description=The identity Pub/Sub push subscriptions present (OIDC) to invoke the functions.' --project=landfall-sample
# create the service account landfall-ui@landfall-sample.iam.gserviceaccount.com
gcloud iam service-accounts create landfall-ui '--display-name=Landfall ui' '--description=Runs the dashboard (Cloud Run service landfall-ui): reads Landfall'"'"'s records, Vertex jobs and models, artifacts, job logs.' --project=landfall-sample

# --- Buckets: landing, teams' code, and artifacts in each job region (uniform access, no public access)
# create the bucket gs://landfall-sample-landfall-landing in us-central1
gcloud storage buckets create gs://landfall-sample-landfall-landing --location=us-central1 --uniform-bucket-level-access --public-access-prevention --project=landfall-sample
# create the bucket gs://landfall-sample-landfall-code in us-central1
gcloud storage buckets create gs://landfall-sample-landfall-code --location=us-central1 --uniform-bucket-level-access --public-access-prevention --project=landfall-sample
# create the bucket gs://landfall-sample-landfall-artifacts-us-central1 in us-central1
gcloud storage buckets create gs://landfall-sample-landfall-artifacts-us-central1 --location=us-central1 --uniform-bucket-level-access --public-access-prevention --project=landfall-sample
# create the bucket gs://landfall-sample-landfall-artifacts-europe-west4 in europe-west4
gcloud storage buckets create gs://landfall-sample-landfall-artifacts-europe-west4 --location=europe-west4 --uniform-bucket-level-access --public-access-prevention --project=landfall-sample
# make sure the Cloud Storage service agent exists (it publishes the bucket's notifications)
gcloud storage service-agent --project=landfall-sample

# --- Pub/Sub: the TrainingRequest schema, topics, dead-letter topics and their hold subscriptions
# create the Protocol Buffer schema landfall-training-request-v2 (python -m schemas.proto writes it)
gcloud pubsub schemas create landfall-training-request-v2 --type=protocol-buffer --definition-file=schemas/training_request.proto --project=landfall-sample
# create the topic landfall-object-events
gcloud pubsub topics create landfall-object-events --project=landfall-sample
# create the topic landfall-training-requests
gcloud pubsub topics create landfall-training-requests --schema=landfall-training-request-v2 --message-encoding=json --project=landfall-sample
# create the topic landfall-job-events
gcloud pubsub topics create landfall-job-events --project=landfall-sample
# create the topic landfall-ingest-sweep
gcloud pubsub topics create landfall-ingest-sweep --project=landfall-sample
# create the topic landfall-dead-letter
gcloud pubsub topics create landfall-dead-letter --project=landfall-sample
# create the topic landfall-reconcile
gcloud pubsub topics create landfall-reconcile --project=landfall-sample
# create the topic landfall-run-results
gcloud pubsub topics create landfall-run-results --project=landfall-sample
# create landfall-dead-letter-hold, which keeps dead letters for 7d
gcloud pubsub subscriptions create landfall-dead-letter-hold --topic=landfall-dead-letter --message-retention-duration=7d --ack-deadline=60 --project=landfall-sample

# --- Grants on the project, buckets, topics and accounts (the sink's writer comes later)
# grant ingest roles/storage.objectViewer on bucket landfall-sample-landfall-landing
gcloud storage buckets add-iam-policy-binding gs://landfall-sample-landfall-landing --member=serviceAccount:landfall-ingest@landfall-sample.iam.gserviceaccount.com --role=roles/storage.objectViewer --project=landfall-sample
# grant ingest roles/pubsub.publisher on topic landfall-training-requests
gcloud pubsub topics add-iam-policy-binding landfall-training-requests --member=serviceAccount:landfall-ingest@landfall-sample.iam.gserviceaccount.com --role=roles/pubsub.publisher --project=landfall-sample
# grant ingest roles/datastore.user on project landfall-sample
gcloud projects add-iam-policy-binding landfall-sample --member=serviceAccount:landfall-ingest@landfall-sample.iam.gserviceaccount.com --role=roles/datastore.user '--condition=expression=resource.name=="projects/landfall-sample/databases/(default)",title=landfall-database,description=Only the Firestore database Landfall keeps its records in'
# grant sweeper roles/storage.objectViewer on bucket landfall-sample-landfall-landing
gcloud storage buckets add-iam-policy-binding gs://landfall-sample-landfall-landing --member=serviceAccount:landfall-sweeper@landfall-sample.iam.gserviceaccount.com --role=roles/storage.objectViewer --project=landfall-sample
# grant sweeper roles/pubsub.publisher on topic landfall-training-requests
gcloud pubsub topics add-iam-policy-binding landfall-training-requests --member=serviceAccount:landfall-sweeper@landfall-sample.iam.gserviceaccount.com --role=roles/pubsub.publisher --project=landfall-sample
# grant sweeper roles/datastore.user on project landfall-sample
gcloud projects add-iam-policy-binding landfall-sample --member=serviceAccount:landfall-sweeper@landfall-sample.iam.gserviceaccount.com --role=roles/datastore.user '--condition=expression=resource.name=="projects/landfall-sample/databases/(default)",title=landfall-database,description=Only the Firestore database Landfall keeps its records in'
# grant dispatch roles/storage.objectViewer on bucket landfall-sample-landfall-landing
gcloud storage buckets add-iam-policy-binding gs://landfall-sample-landfall-landing --member=serviceAccount:landfall-dispatch@landfall-sample.iam.gserviceaccount.com --role=roles/storage.objectViewer --project=landfall-sample
# grant dispatch roles/storage.objectViewer on bucket landfall-sample-landfall-code
gcloud storage buckets add-iam-policy-binding gs://landfall-sample-landfall-code --member=serviceAccount:landfall-dispatch@landfall-sample.iam.gserviceaccount.com --role=roles/storage.objectViewer --project=landfall-sample
# grant dispatch roles/storage.objectUser on bucket landfall-sample-landfall-artifacts-us-central1
gcloud storage buckets add-iam-policy-binding gs://landfall-sample-landfall-artifacts-us-central1 --member=serviceAccount:landfall-dispatch@landfall-sample.iam.gserviceaccount.com --role=roles/storage.objectUser --project=landfall-sample '--condition=expression=resource.name.startsWith("projects/_/buckets/landfall-sample-landfall-artifacts-us-central1/objects/runs/"),title=landfall-runs-folder,description=Only the runs folder of the artifacts bucket'
# grant dispatch roles/storage.objectUser on bucket landfall-sample-landfall-artifacts-europe-west4
gcloud storage buckets add-iam-policy-binding gs://landfall-sample-landfall-artifacts-europe-west4 --member=serviceAccount:landfall-dispatch@landfall-sample.iam.gserviceaccount.com --role=roles/storage.objectUser --project=landfall-sample '--condition=expression=resource.name.startsWith("projects/_/buckets/landfall-sample-landfall-artifacts-europe-west4/objects/runs/"),title=landfall-runs-folder,description=Only the runs folder of the artifacts bucket'
# grant dispatch roles/datastore.user on project landfall-sample
gcloud projects add-iam-policy-binding landfall-sample --member=serviceAccount:landfall-dispatch@landfall-sample.iam.gserviceaccount.com --role=roles/datastore.user '--condition=expression=resource.name=="projects/landfall-sample/databases/(default)",title=landfall-database,description=Only the Firestore database Landfall keeps its records in'
# grant dispatch roles/aiplatform.user on project landfall-sample
gcloud projects add-iam-policy-binding landfall-sample --member=serviceAccount:landfall-dispatch@landfall-sample.iam.gserviceaccount.com --role=roles/aiplatform.user --condition=None
# grant dispatch roles/iam.serviceAccountUser on service_account landfall-trainer@landfall-sample.iam.gserviceaccount.com
gcloud iam service-accounts add-iam-policy-binding landfall-trainer@landfall-sample.iam.gserviceaccount.com --member=serviceAccount:landfall-dispatch@landfall-sample.iam.gserviceaccount.com --role=roles/iam.serviceAccountUser --project=landfall-sample
# grant listener roles/datastore.user on project landfall-sample
gcloud projects add-iam-policy-binding landfall-sample --member=serviceAccount:landfall-listener@landfall-sample.iam.gserviceaccount.com --role=roles/datastore.user '--condition=expression=resource.name=="projects/landfall-sample/databases/(default)",title=landfall-database,description=Only the Firestore database Landfall keeps its records in'
# grant listener roles/aiplatform.user on project landfall-sample
gcloud projects add-iam-policy-binding landfall-sample --member=serviceAccount:landfall-listener@landfall-sample.iam.gserviceaccount.com --role=roles/aiplatform.user --condition=None
# grant listener roles/iam.serviceAccountUser on service_account landfall-trainer@landfall-sample.iam.gserviceaccount.com
gcloud iam service-accounts add-iam-policy-binding landfall-trainer@landfall-sample.iam.gserviceaccount.com --member=serviceAccount:landfall-listener@landfall-sample.iam.gserviceaccount.com --role=roles/iam.serviceAccountUser --project=landfall-sample
# grant listener roles/storage.objectViewer on bucket landfall-sample-landfall-artifacts-us-central1
gcloud storage buckets add-iam-policy-binding gs://landfall-sample-landfall-artifacts-us-central1 --member=serviceAccount:landfall-listener@landfall-sample.iam.gserviceaccount.com --role=roles/storage.objectViewer --project=landfall-sample
# grant listener roles/storage.objectViewer on bucket landfall-sample-landfall-artifacts-europe-west4
gcloud storage buckets add-iam-policy-binding gs://landfall-sample-landfall-artifacts-europe-west4 --member=serviceAccount:landfall-listener@landfall-sample.iam.gserviceaccount.com --role=roles/storage.objectViewer --project=landfall-sample
# grant listener roles/pubsub.publisher on topic landfall-run-results
gcloud pubsub topics add-iam-policy-binding landfall-run-results --member=serviceAccount:landfall-listener@landfall-sample.iam.gserviceaccount.com --role=roles/pubsub.publisher --project=landfall-sample
# grant reconciler roles/storage.objectViewer on bucket landfall-sample-landfall-landing
gcloud storage buckets add-iam-policy-binding gs://landfall-sample-landfall-landing --member=serviceAccount:landfall-reconciler@landfall-sample.iam.gserviceaccount.com --role=roles/storage.objectViewer --project=landfall-sample
# grant reconciler roles/datastore.user on project landfall-sample
gcloud projects add-iam-policy-binding landfall-sample --member=serviceAccount:landfall-reconciler@landfall-sample.iam.gserviceaccount.com --role=roles/datastore.user '--condition=expression=resource.name=="projects/landfall-sample/databases/(default)",title=landfall-database,description=Only the Firestore database Landfall keeps its records in'
# grant reconciler roles/aiplatform.user on project landfall-sample
gcloud projects add-iam-policy-binding landfall-sample --member=serviceAccount:landfall-reconciler@landfall-sample.iam.gserviceaccount.com --role=roles/aiplatform.user --condition=None
# grant reconciler roles/iam.serviceAccountUser on service_account landfall-trainer@landfall-sample.iam.gserviceaccount.com
gcloud iam service-accounts add-iam-policy-binding landfall-trainer@landfall-sample.iam.gserviceaccount.com --member=serviceAccount:landfall-reconciler@landfall-sample.iam.gserviceaccount.com --role=roles/iam.serviceAccountUser --project=landfall-sample
# grant reconciler roles/storage.objectViewer on bucket landfall-sample-landfall-artifacts-us-central1
gcloud storage buckets add-iam-policy-binding gs://landfall-sample-landfall-artifacts-us-central1 --member=serviceAccount:landfall-reconciler@landfall-sample.iam.gserviceaccount.com --role=roles/storage.objectViewer --project=landfall-sample
# grant reconciler roles/storage.objectViewer on bucket landfall-sample-landfall-artifacts-europe-west4
gcloud storage buckets add-iam-policy-binding gs://landfall-sample-landfall-artifacts-europe-west4 --member=serviceAccount:landfall-reconciler@landfall-sample.iam.gserviceaccount.com --role=roles/storage.objectViewer --project=landfall-sample
# grant reconciler roles/storage.objectUser on bucket landfall-sample-landfall-artifacts-us-central1
gcloud storage buckets add-iam-policy-binding gs://landfall-sample-landfall-artifacts-us-central1 --member=serviceAccount:landfall-reconciler@landfall-sample.iam.gserviceaccount.com --role=roles/storage.objectUser --project=landfall-sample '--condition=expression=resource.name.startsWith("projects/_/buckets/landfall-sample-landfall-artifacts-us-central1/objects/runs/"),title=landfall-runs-folder,description=Only the runs folder of the artifacts bucket'
# grant reconciler roles/storage.objectUser on bucket landfall-sample-landfall-artifacts-europe-west4
gcloud storage buckets add-iam-policy-binding gs://landfall-sample-landfall-artifacts-europe-west4 --member=serviceAccount:landfall-reconciler@landfall-sample.iam.gserviceaccount.com --role=roles/storage.objectUser --project=landfall-sample '--condition=expression=resource.name.startsWith("projects/_/buckets/landfall-sample-landfall-artifacts-europe-west4/objects/runs/"),title=landfall-runs-folder,description=Only the runs folder of the artifacts bucket'
# grant reconciler roles/storage.objectViewer on bucket landfall-sample-landfall-code
gcloud storage buckets add-iam-policy-binding gs://landfall-sample-landfall-code --member=serviceAccount:landfall-reconciler@landfall-sample.iam.gserviceaccount.com --role=roles/storage.objectViewer --project=landfall-sample
# grant reconciler roles/pubsub.publisher on topic landfall-run-results
gcloud pubsub topics add-iam-policy-binding landfall-run-results --member=serviceAccount:landfall-reconciler@landfall-sample.iam.gserviceaccount.com --role=roles/pubsub.publisher --project=landfall-sample
# grant reconciler roles/pubsub.publisher on topic landfall-training-requests
gcloud pubsub topics add-iam-policy-binding landfall-training-requests --member=serviceAccount:landfall-reconciler@landfall-sample.iam.gserviceaccount.com --role=roles/pubsub.publisher --project=landfall-sample
# grant trainer roles/storage.objectViewer on bucket landfall-sample-landfall-landing
gcloud storage buckets add-iam-policy-binding gs://landfall-sample-landfall-landing --member=serviceAccount:landfall-trainer@landfall-sample.iam.gserviceaccount.com --role=roles/storage.objectViewer --project=landfall-sample
# grant trainer roles/storage.objectViewer on bucket landfall-sample-landfall-code
gcloud storage buckets add-iam-policy-binding gs://landfall-sample-landfall-code --member=serviceAccount:landfall-trainer@landfall-sample.iam.gserviceaccount.com --role=roles/storage.objectViewer --project=landfall-sample
# grant trainer roles/storage.objectUser on bucket landfall-sample-landfall-artifacts-us-central1
gcloud storage buckets add-iam-policy-binding gs://landfall-sample-landfall-artifacts-us-central1 --member=serviceAccount:landfall-trainer@landfall-sample.iam.gserviceaccount.com --role=roles/storage.objectUser --project=landfall-sample
# grant trainer roles/storage.objectUser on bucket landfall-sample-landfall-artifacts-europe-west4
gcloud storage buckets add-iam-policy-binding gs://landfall-sample-landfall-artifacts-europe-west4 --member=serviceAccount:landfall-trainer@landfall-sample.iam.gserviceaccount.com --role=roles/storage.objectUser --project=landfall-sample
# grant builder roles/logging.logWriter on project landfall-sample
gcloud projects add-iam-policy-binding landfall-sample --member=serviceAccount:landfall-builder@landfall-sample.iam.gserviceaccount.com --role=roles/logging.logWriter --condition=None
# grant builder roles/artifactregistry.writer on project landfall-sample
gcloud projects add-iam-policy-binding landfall-sample --member=serviceAccount:landfall-builder@landfall-sample.iam.gserviceaccount.com --role=roles/artifactregistry.writer --condition=None
# grant builder roles/storage.objectViewer on project landfall-sample
gcloud projects add-iam-policy-binding landfall-sample --member=serviceAccount:landfall-builder@landfall-sample.iam.gserviceaccount.com --role=roles/storage.objectViewer '--condition=expression=resource.name.startsWith("projects/_/buckets/landfall-sample_cloudbuild") || resource.name.startsWith("projects/_/buckets/gcf-v2-sources-"),title=landfall-build-sources,description=Only the buckets Cloud Build reads uploaded sources from'
# grant ui roles/datastore.viewer on project landfall-sample
gcloud projects add-iam-policy-binding landfall-sample --member=serviceAccount:landfall-ui@landfall-sample.iam.gserviceaccount.com --role=roles/datastore.viewer '--condition=expression=resource.name=="projects/landfall-sample/databases/(default)",title=landfall-database,description=Only the Firestore database Landfall keeps its records in'
# grant ui roles/aiplatform.viewer on project landfall-sample
gcloud projects add-iam-policy-binding landfall-sample --member=serviceAccount:landfall-ui@landfall-sample.iam.gserviceaccount.com --role=roles/aiplatform.viewer --condition=None
# grant ui roles/storage.objectViewer on bucket landfall-sample-landfall-artifacts-us-central1
gcloud storage buckets add-iam-policy-binding gs://landfall-sample-landfall-artifacts-us-central1 --member=serviceAccount:landfall-ui@landfall-sample.iam.gserviceaccount.com --role=roles/storage.objectViewer --project=landfall-sample
# grant ui roles/storage.objectViewer on bucket landfall-sample-landfall-artifacts-europe-west4
gcloud storage buckets add-iam-policy-binding gs://landfall-sample-landfall-artifacts-europe-west4 --member=serviceAccount:landfall-ui@landfall-sample.iam.gserviceaccount.com --role=roles/storage.objectViewer --project=landfall-sample
# grant ui roles/logging.viewer on project landfall-sample
gcloud projects add-iam-policy-binding landfall-sample --member=serviceAccount:landfall-ui@landfall-sample.iam.gserviceaccount.com --role=roles/logging.viewer --condition=None
# grant storage roles/pubsub.publisher on topic landfall-object-events
gcloud pubsub topics add-iam-policy-binding landfall-object-events --member=serviceAccount:service-123456789012@gs-project-accounts.iam.gserviceaccount.com --role=roles/pubsub.publisher --project=landfall-sample
# grant pubsub roles/pubsub.publisher on topic landfall-dead-letter
gcloud pubsub topics add-iam-policy-binding landfall-dead-letter --member=serviceAccount:service-123456789012@gcp-sa-pubsub.iam.gserviceaccount.com --role=roles/pubsub.publisher --project=landfall-sample
# grant pubsub roles/iam.serviceAccountTokenCreator on service_account landfall-invoker@landfall-sample.iam.gserviceaccount.com
gcloud iam service-accounts add-iam-policy-binding landfall-invoker@landfall-sample.iam.gserviceaccount.com --member=serviceAccount:service-123456789012@gcp-sa-pubsub.iam.gserviceaccount.com --role=roles/iam.serviceAccountTokenCreator --project=landfall-sample

# --- The trainer images: one per CUDA line, built by Cloud Build, pushed to a repository in every job region
# create the Docker repository landfall in us-central1
gcloud artifacts repositories create landfall --repository-format=docker --location=us-central1 '--description=Landfall trainer images' --project=landfall-sample
# create the Docker repository landfall in europe-west4
gcloud artifacts repositories create landfall --repository-format=docker --location=europe-west4 '--description=Landfall trainer images' --project=landfall-sample
# build the trainer images (trainer (CUDA 12.6) for sm_60, sm_70, sm_75, sm_80, sm_86, sm_90, trainer-cu130 (CUDA 13.0) for sm_75, sm_80, sm_86, sm_90, sm_100, sm_120; Google's Reduction Server plugin in each) and push us-central1-docker.pkg.dev/landfall-sample/landfall/trainer:golden, europe-west4-docker.pkg.dev/landfall-sample/landfall/trainer:golden, us-central1-docker.pkg.dev/landfall-sample/landfall/trainer-cu130:golden, europe-west4-docker.pkg.dev/landfall-sample/landfall/trainer-cu130:golden (the tag is the hash of the staged context: unchanged code is not rebuilt)
gcloud builds submit .landfall/deploy/trainer --config=.landfall/deploy/trainer.cloudbuild.json --service-account=projects/landfall-sample/serviceAccounts/landfall-builder@landfall-sample.iam.gserviceaccount.com --timeout=3600s --region=us-central1 --project=landfall-sample

# --- Functions: HTTP functions that only the invoker account may call
# deploy landfall-on-object-finalized (entry point on_object_finalized) from .landfall/deploy/functions/on_object_finalized
gcloud functions deploy landfall-on-object-finalized --gen2 --region=us-central1 --runtime=python313 --source=.landfall/deploy/functions/on_object_finalized --entry-point=on_object_finalized --trigger-http --no-allow-unauthenticated --service-account=landfall-ingest@landfall-sample.iam.gserviceaccount.com --build-service-account=projects/landfall-sample/serviceAccounts/landfall-builder@landfall-sample.iam.gserviceaccount.com --memory=512Mi --cpu=1 --timeout=60s --min-instances=0 --max-instances=100 --concurrency=8 --env-vars-file=.landfall/deploy/functions/on_object_finalized.env.yaml --project=landfall-sample
# deploy landfall-dispatch (entry point dispatch) from .landfall/deploy/functions/dispatch
gcloud functions deploy landfall-dispatch --gen2 --region=us-central1 --runtime=python313 --source=.landfall/deploy/functions/dispatch --entry-point=dispatch --trigger-http --no-allow-unauthenticated --service-account=landfall-dispatch@landfall-sample.iam.gserviceaccount.com --build-service-account=projects/landfall-sample/serviceAccounts/landfall-builder@landfall-sample.iam.gserviceaccount.com --memory=1Gi --cpu=1 --timeout=120s --min-instances=0 --max-instances=10 --concurrency=1 --env-vars-file=.landfall/deploy/functions/dispatch.env.yaml --project=landfall-sample
# deploy landfall-on-job-event (entry point on_job_event) from .landfall/deploy/functions/on_job_event
gcloud functions deploy landfall-on-job-event --gen2 --region=us-central1 --runtime=python313 --source=.landfall/deploy/functions/on_job_event --entry-point=on_job_event --trigger-http --no-allow-unauthenticated --service-account=landfall-listener@landfall-sample.iam.gserviceaccount.com --build-service-account=projects/landfall-sample/serviceAccounts/landfall-builder@landfall-sample.iam.gserviceaccount.com --memory=512Mi --cpu=1 --timeout=60s --min-instances=0 --max-instances=10 --concurrency=4 --env-vars-file=.landfall/deploy/functions/on_job_event.env.yaml --project=landfall-sample
# deploy landfall-sweep-datasets (entry point sweep_datasets) from .landfall/deploy/functions/sweep_datasets
gcloud functions deploy landfall-sweep-datasets --gen2 --region=us-central1 --runtime=python313 --source=.landfall/deploy/functions/sweep_datasets --entry-point=sweep_datasets --trigger-http --no-allow-unauthenticated --service-account=landfall-sweeper@landfall-sample.iam.gserviceaccount.com --build-service-account=projects/landfall-sample/serviceAccounts/landfall-builder@landfall-sample.iam.gserviceaccount.com --memory=512Mi --cpu=1 --timeout=300s --min-instances=0 --max-instances=1 --concurrency=1 --env-vars-file=.landfall/deploy/functions/sweep_datasets.env.yaml --project=landfall-sample
# deploy landfall-reconcile-runs (entry point reconcile_runs) from .landfall/deploy/functions/reconcile_runs
gcloud functions deploy landfall-reconcile-runs --gen2 --region=us-central1 --runtime=python313 --source=.landfall/deploy/functions/reconcile_runs --entry-point=reconcile_runs --trigger-http --no-allow-unauthenticated --service-account=landfall-reconciler@landfall-sample.iam.gserviceaccount.com --build-service-account=projects/landfall-sample/serviceAccounts/landfall-builder@landfall-sample.iam.gserviceaccount.com --memory=512Mi --cpu=1 --timeout=300s --min-instances=0 --max-instances=1 --concurrency=1 --env-vars-file=.landfall/deploy/functions/reconcile_runs.env.yaml --project=landfall-sample
# grant invoker roles/run.invoker on function landfall-on-object-finalized
gcloud functions add-invoker-policy-binding landfall-on-object-finalized --region=us-central1 --member=serviceAccount:landfall-invoker@landfall-sample.iam.gserviceaccount.com --project=landfall-sample
# grant invoker roles/run.invoker on function landfall-dispatch
gcloud functions add-invoker-policy-binding landfall-dispatch --region=us-central1 --member=serviceAccount:landfall-invoker@landfall-sample.iam.gserviceaccount.com --project=landfall-sample
# grant invoker roles/run.invoker on function landfall-on-job-event
gcloud functions add-invoker-policy-binding landfall-on-job-event --region=us-central1 --member=serviceAccount:landfall-invoker@landfall-sample.iam.gserviceaccount.com --project=landfall-sample
# grant invoker roles/run.invoker on function landfall-sweep-datasets
gcloud functions add-invoker-policy-binding landfall-sweep-datasets --region=us-central1 --member=serviceAccount:landfall-invoker@landfall-sample.iam.gserviceaccount.com --project=landfall-sample
# grant invoker roles/run.invoker on function landfall-reconcile-runs
gcloud functions add-invoker-policy-binding landfall-reconcile-runs --region=us-central1 --member=serviceAccount:landfall-invoker@landfall-sample.iam.gserviceaccount.com --project=landfall-sample

# --- Push subscriptions: authenticated, with a dead-letter topic, delivery attempts and back-off
# create the subscription landfall-object-events-ingest pushing landfall-object-events to on_object_finalized
gcloud pubsub subscriptions create landfall-object-events-ingest --topic=landfall-object-events --push-endpoint=https://us-central1-landfall-sample.cloudfunctions.net/landfall-on-object-finalized --push-auth-service-account=landfall-invoker@landfall-sample.iam.gserviceaccount.com --ack-deadline=60 --dead-letter-topic=landfall-dead-letter --max-delivery-attempts=10 --min-retry-delay=1s --max-retry-delay=60s --project=landfall-sample
# create the subscription landfall-training-requests-dispatch pushing landfall-training-requests to dispatch
gcloud pubsub subscriptions create landfall-training-requests-dispatch --topic=landfall-training-requests --push-endpoint=https://us-central1-landfall-sample.cloudfunctions.net/landfall-dispatch --push-auth-service-account=landfall-invoker@landfall-sample.iam.gserviceaccount.com --ack-deadline=120 --dead-letter-topic=landfall-dead-letter --max-delivery-attempts=15 --min-retry-delay=1s --max-retry-delay=60s --project=landfall-sample
# create the subscription landfall-job-events-listener pushing landfall-job-events to on_job_event
gcloud pubsub subscriptions create landfall-job-events-listener --topic=landfall-job-events --push-endpoint=https://us-central1-landfall-sample.cloudfunctions.net/landfall-on-job-event --push-auth-service-account=landfall-invoker@landfall-sample.iam.gserviceaccount.com --ack-deadline=60 --dead-letter-topic=landfall-dead-letter --max-delivery-attempts=10 --min-retry-delay=1s --max-retry-delay=60s --project=landfall-sample
# create the subscription landfall-ingest-sweep-sweeper pushing landfall-ingest-sweep to sweep_datasets
gcloud pubsub subscriptions create landfall-ingest-sweep-sweeper --topic=landfall-ingest-sweep --push-endpoint=https://us-central1-landfall-sample.cloudfunctions.net/landfall-sweep-datasets --push-auth-service-account=landfall-invoker@landfall-sample.iam.gserviceaccount.com --ack-deadline=300 --dead-letter-topic=landfall-dead-letter --max-delivery-attempts=5 --min-retry-delay=10s --max-retry-delay=60s --project=landfall-sample
# create the subscription landfall-reconcile-reconciler pushing landfall-reconcile to reconcile_runs
gcloud pubsub subscriptions create landfall-reconcile-reconciler --topic=landfall-reconcile --push-endpoint=https://us-central1-landfall-sample.cloudfunctions.net/landfall-reconcile-runs --push-auth-service-account=landfall-invoker@landfall-sample.iam.gserviceaccount.com --ack-deadline=300 --dead-letter-topic=landfall-dead-letter --max-delivery-attempts=5 --min-retry-delay=10s --max-retry-delay=60s --project=landfall-sample
# grant pubsub roles/pubsub.subscriber on subscription landfall-object-events-ingest
gcloud pubsub subscriptions add-iam-policy-binding landfall-object-events-ingest --member=serviceAccount:service-123456789012@gcp-sa-pubsub.iam.gserviceaccount.com --role=roles/pubsub.subscriber --project=landfall-sample
# grant pubsub roles/pubsub.subscriber on subscription landfall-training-requests-dispatch
gcloud pubsub subscriptions add-iam-policy-binding landfall-training-requests-dispatch --member=serviceAccount:service-123456789012@gcp-sa-pubsub.iam.gserviceaccount.com --role=roles/pubsub.subscriber --project=landfall-sample
# grant pubsub roles/pubsub.subscriber on subscription landfall-job-events-listener
gcloud pubsub subscriptions add-iam-policy-binding landfall-job-events-listener --member=serviceAccount:service-123456789012@gcp-sa-pubsub.iam.gserviceaccount.com --role=roles/pubsub.subscriber --project=landfall-sample
# grant pubsub roles/pubsub.subscriber on subscription landfall-ingest-sweep-sweeper
gcloud pubsub subscriptions add-iam-policy-binding landfall-ingest-sweep-sweeper --member=serviceAccount:service-123456789012@gcp-sa-pubsub.iam.gserviceaccount.com --role=roles/pubsub.subscriber --project=landfall-sample
# grant pubsub roles/pubsub.subscriber on subscription landfall-reconcile-reconciler
gcloud pubsub subscriptions add-iam-policy-binding landfall-reconcile-reconciler --member=serviceAccount:service-123456789012@gcp-sa-pubsub.iam.gserviceaccount.com --role=roles/pubsub.subscriber --project=landfall-sample

# --- Bucket notification: OBJECT_FINALIZE of the routed prefixes to the object-events topic
# notify landfall-object-events of objects finalized under gs://landfall-sample-landfall-landing/datasets/
gcloud storage buckets notifications create gs://landfall-sample-landfall-landing --topic=projects/landfall-sample/topics/landfall-object-events --event-types=OBJECT_FINALIZE --payload-format=json --object-prefix=datasets/ --skip-topic-setup --project=landfall-sample
# notify landfall-object-events of objects finalized under gs://landfall-sample-landfall-landing/regression/
gcloud storage buckets notifications create gs://landfall-sample-landfall-landing --topic=projects/landfall-sample/topics/landfall-object-events --event-types=OBJECT_FINALIZE --payload-format=json --object-prefix=regression/ --skip-topic-setup --project=landfall-sample
# notify landfall-object-events of objects finalized under gs://landfall-sample-landfall-landing/exports/
gcloud storage buckets notifications create gs://landfall-sample-landfall-landing --topic=projects/landfall-sample/topics/landfall-object-events --event-types=OBJECT_FINALIZE --payload-format=json --object-prefix=exports/ --skip-topic-setup --project=landfall-sample

# --- Job events: the Cloud Logging sink carrying Vertex job log entries to the job-events topic
# create the log sink landfall-job-events
gcloud logging sinks create landfall-job-events pubsub.googleapis.com/projects/landfall-sample/topics/landfall-job-events '--log-filter=resource.type="ml_job" AND resource.labels.task_name="service"' '--description=Vertex AI job log entries for the Landfall on_job_event function' --project=landfall-sample
# grant log_sink roles/pubsub.publisher on topic landfall-job-events
gcloud pubsub topics add-iam-policy-binding landfall-job-events --member=serviceAccount:service-123456789012@gcp-sa-logging.iam.gserviceaccount.com --role=roles/pubsub.publisher --project=landfall-sample

# --- Schedules: Cloud Scheduler publishes each tick
# create the scheduler job landfall-ingest-sweep (* * * * *) publishing to landfall-ingest-sweep
gcloud scheduler jobs create pubsub landfall-ingest-sweep --location=us-central1 '--schedule=* * * * *' --topic=projects/landfall-sample/topics/landfall-ingest-sweep '--message-body={"schedule":"ingest_sweep"}' --attributes=schedule=ingest_sweep --time-zone=Etc/UTC --project=landfall-sample
# create the scheduler job landfall-reconcile (* * * * *) publishing to landfall-reconcile
gcloud scheduler jobs create pubsub landfall-reconcile --location=us-central1 '--schedule=* * * * *' --topic=projects/landfall-sample/topics/landfall-reconcile '--message-body={"schedule":"reconcile"}' --attributes=schedule=reconcile --time-zone=Etc/UTC --project=landfall-sample

# --- The dashboard: Cloud Run service landfall-ui, which only --ui-users may invoke (IAM check)
# build the dashboard's image us-central1-docker.pkg.dev/landfall-sample/landfall/ui:golden (deploy/ui/Dockerfile; the tag is the hash of the staged context: an unchanged dashboard is not rebuilt)
gcloud builds submit .landfall/deploy/ui --config=.landfall/deploy/ui.cloudbuild.json --service-account=projects/landfall-sample/serviceAccounts/landfall-builder@landfall-sample.iam.gserviceaccount.com --timeout=3600s --region=us-central1 --project=landfall-sample
# deploy landfall-ui as landfall-ui@landfall-sample.iam.gserviceaccount.com, refusing unauthenticated calls, with the settings the CLI reads (.landfall/deploy/ui.env.yaml)
gcloud run deploy landfall-ui --image=us-central1-docker.pkg.dev/landfall-sample/landfall/ui:golden --region=us-central1 --service-account=landfall-ui@landfall-sample.iam.gserviceaccount.com --no-allow-unauthenticated --invoker-iam-check --env-vars-file=.landfall/deploy/ui.env.yaml --memory=1Gi --cpu=1 --min-instances=0 --max-instances=3 --concurrency=40 --timeout=300s --project=landfall-sample
# let exactly group:ml-team@example.com, user:ana@example.com invoke landfall-ui (roles/run.invoker; the policy in .landfall/deploy/ui.policy.json replaces the service's, so a principal dropped from --ui-users loses access)
gcloud run services set-iam-policy landfall-ui .landfall/deploy/ui.policy.json --region=us-central1 --project=landfall-sample
