from django.db import models
from django.db.models import Func, Value

# snippet: django-model
class Event(models.Model):
    # A BigAutoField in Django's eyes, so create() and bulk_create() read the key back with
    # RETURNING; migration 0001 swaps the column's identity for DEFAULT snowid_next(5).
    id = models.BigAutoField(primary_key=True)
    note = models.CharField(max_length=40)
# end snippet


class EventDbDefault(models.Model):
    """db_default: create() gets the ID back, bulk_create() leaves DatabaseDefault objects."""

    id = models.BigIntegerField(
        primary_key=True,
        db_default=Func(Value(5), function="snowid_next", output_field=models.BigIntegerField()),
    )
    note = models.CharField(max_length=40)


class SnowIdField(models.BigAutoField):
    """A BigAutoField whose column is created as `bigint DEFAULT snowid_next(5)` instead of an
    identity: no RunSQL needed. Tried here as an alternative."""

    def db_type_suffix(self, connection):
        return "DEFAULT snowid_next(5)"


class EventSnowIdField(models.Model):
    id = SnowIdField(primary_key=True)
    note = models.CharField(max_length=40)
