import sys

from tests.campaign.run import main

sys.exit(main())
