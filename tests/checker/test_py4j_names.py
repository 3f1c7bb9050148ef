"""The checker's py4j name cache (chaos/checker/py4j_names.py): a name asked twice is one round trip,
a static field is read each time, and a name that is nothing still fails each time."""

from __future__ import annotations

import pytest
from py4j.protocol import Py4JError


def _round_trips(spark, monkeypatch) -> list[str]:
    client = spark.sparkContext._gateway._gateway_client
    sent: list[str] = []
    original = type(client).send_command

    def counting(self, command, *args, **kwargs):
        sent.append(command)
        return original(self, command, *args, **kwargs)

    monkeypatch.setattr(type(client), "send_command", counting)
    return sent


def test_a_class_and_a_static_method_are_looked_up_once(spark, monkeypatch):
    jvm = spark.sparkContext._jvm
    jvm.PythonUtils.toSeq  # noqa: B018 - the first lookup may go to the JVM
    sent = _round_trips(spark, monkeypatch)
    assert jvm.PythonUtils.toSeq is jvm.PythonUtils.toSeq
    assert getattr(jvm, "org.apache.spark.sql.functions") is getattr(jvm, "org.apache.spark.sql.functions")
    assert jvm.java.lang.Integer is jvm.java.lang.Integer
    looked_up = len(sent)
    assert jvm.java.lang.Integer.MAX_VALUE == 2**31 - 1
    assert len(sent) == looked_up + 1  # a field's value is read from the JVM every time
    assert jvm.PythonUtils.toSeq([1, 2]).size() == 2


def test_a_missing_member_fails_every_time(spark, monkeypatch):
    utils = spark.sparkContext._jvm.PythonUtils
    sent = _round_trips(spark, monkeypatch)
    for _ in range(2):
        with pytest.raises(Py4JError, match="does not exist"):
            utils.noSuchMemberHere  # noqa: B018
    assert len(sent) == 2
