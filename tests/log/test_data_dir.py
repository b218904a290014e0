"""A data directory's meta.properties: written by the broker that claims it, read back by the
broker and by Spark executors that read segments straight from storage."""
from ember.log.data_dir import META_FILE, broker_id_of, read_meta, write_meta


def test_a_claimed_directory_reads_back_its_broker_and_cluster(tmp_path):
    assert read_meta(tmp_path) is None
    write_meta(tmp_path, 7, "cluster-a")
    assert read_meta(tmp_path) == {"broker.id": "7", "cluster.id": "cluster-a"}
    assert broker_id_of(tmp_path) == 7
    assert not list(tmp_path.glob("*.tmp"))


def test_the_owner_of_an_unclaimed_directory_comes_from_a_broker_dash_id_name(tmp_path):
    assert broker_id_of(tmp_path / "broker-3") == 3
    assert broker_id_of(tmp_path / "data") is None


def test_a_meta_file_with_stray_lines_still_names_its_broker(tmp_path):
    (tmp_path / META_FILE).write_text("written by hand, no separator\nbroker.id=4\n")
    assert broker_id_of(tmp_path) == 4


def test_a_meta_file_without_a_numeric_broker_id_tells_no_owner(tmp_path):
    (tmp_path / META_FILE).write_text("broker.id=not-a-number\n")
    assert broker_id_of(tmp_path) is None
