"""A minimal Django project for the snowid client test; the server comes from libpq's
environment (PGHOST, PGPORT, PGUSER, PGDATABASE), set by tests/clients/run."""

import os

SECRET_KEY = "snowid-client-tests-only"
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["snowapp"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ["PGDATABASE"],
        "USER": os.environ.get("PGUSER", "postgres"),
        "HOST": os.environ.get("PGHOST", "127.0.0.1"),
        "PORT": os.environ.get("PGPORT", "5432"),
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
