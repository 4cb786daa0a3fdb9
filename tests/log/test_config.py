import pytest

from strata.errors import StrataError
from strata.log.config import DEFAULT_BOOTSTRAP, settings_from


def test_defaults():
    s = settings_from(environ={})
    assert (s.bootstrap, s.topic_prefix, str(s.data_dir), s.db_url, s.kubeconfig) == (
        DEFAULT_BOOTSTRAP,
        "strata.",
        ".strata",
        None,
        None,
    )
    assert s.checkpoint_url.startswith("sqlite:///") and s.checkpoint_url.endswith("/.strata/strata.db")


def test_environment_then_flags():
    env = {
        "STRATA_KAFKA_BOOTSTRAP": "k:1",
        "STRATA_TOPIC_PREFIX": "env.",
        "STRATA_DB_URL": "postgresql://x/y",
        "STRATA_DATA_DIR": "/d",
        "KUBECONFIG": "/kc",
        "STRATA_REPLICATION_FACTOR": "3",
        "STRATA_MIN_INSYNC_REPLICAS": "2",
    }
    s = settings_from(environ=env)
    assert (s.bootstrap, s.topic_prefix, s.db_url, str(s.data_dir), s.kubeconfig) == (
        "k:1",
        "env.",
        "postgresql://x/y",
        "/d",
        "/kc",
    )
    assert (s.replication_factor, s.min_insync_replicas) == (3, 2)
    s = settings_from(
        environ=env, bootstrap="flag:2", topic_prefix="", db_url="sqlite:///z", data_dir="/f", kubeconfig="/k2"
    )
    assert (s.bootstrap, s.topic_prefix, s.db_url, str(s.data_dir), s.kubeconfig) == (
        "flag:2",
        "",
        "sqlite:///z",
        "/f",
        "/k2",
    )


def test_kafka_security_settings_pass_through():
    env = {
        "STRATA_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "STRATA_KAFKA_SASL_MECHANISMS": "SCRAM-SHA-512",
        "STRATA_KAFKA_SASL_USERNAME": "u",
        "STRATA_KAFKA_SASL_PASSWORD": "p",
        "STRATA_KAFKA_SSL_CA_LOCATION": "/ca.pem",
        "STRATA_KAFKA_BOOTSTRAP": "b:1",
        "STRATA_KAFKA_UNRELATED": "x",
    }
    s = settings_from(environ=env, kafka_properties=("sasl.username=flag-user", "client.id=me"))
    assert dict(s.kafka) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "flag-user",
        "sasl.password": "p",
        "ssl.ca.location": "/ca.pem",
        "client.id": "me",
    }
    config = s.client_config(**{"group.id": "g"})
    assert (
        config["bootstrap.servers"] == "b:1" and config["security.protocol"] == "SASL_SSL" and config["group.id"] == "g"
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"topic_prefix": "bad prefix!"}, "topic prefix"),
        ({"kafka_properties": ("novalue",)}, "-X takes key=value"),
        ({"environ": {"STRATA_REPLICATION_FACTOR": "zero"}}, "STRATA_REPLICATION_FACTOR must be a positive integer"),
    ],
)
def test_bad_settings_are_clear_errors(kwargs, message):
    kwargs.setdefault("environ", {})
    with pytest.raises(StrataError, match=message):
        settings_from(**kwargs)


def test_retry_delays_and_digest_cadence_from_the_environment():
    settings = settings_from(environ={"STRATA_RETRY_DELAYS": "2,20", "STRATA_DIGEST_EVERY": "1000"})
    assert settings.retry_delays_s == (2, 20) and settings.digest_every == 1000
    assert settings_from(environ={}).retry_delays_s == (1, 10, 60)
    for bad in ("1,1", "0,5", "a,b", "5,-1"):
        with pytest.raises(StrataError, match="STRATA_RETRY_DELAYS"):
            settings_from(environ={"STRATA_RETRY_DELAYS": bad})
