"""Configuration (docs/store-format.md §11, §12.3)."""

import json
import os

import pytest

from msgstore.store import ConfigError, StoreConfig
from msgstore.store.config import HOT_KEYS, KEYS, RESTART_KEYS, parse_assignments


def test_reference_defaults():
    c = StoreConfig()
    assert c.mappedFileSizeCommitLog == 1024**3
    assert c.cq_file_size == 6_000_000
    assert (c.maxHashSlotNum, c.maxIndexNum) == (5_000_000, 20_000_000)
    assert (c.fileReservedTime, c.deleteWhen) == (72, "04")
    assert (c.diskMaxUsedSpaceRatio, c.diskSpaceCleanForciblyRatio, c.diskSpaceWarningLevelRatio) == (75, 85, 90)
    assert (c.deleteFileBatchMax, c.deleteCommitLogFilesInterval, c.deleteConsumeQueueFilesInterval) == (10, 100, 100)
    assert (c.destroyMapedFileIntervalForcibly, c.redeleteHangedFileInterval) == (120_000, 120_000)
    assert (c.flushIntervalCommitLog, c.flushCommitLogLeastPages, c.flushCommitLogThoroughInterval) == (500, 4, 10_000)
    assert (c.syncFlushTimeout, c.maxMessageSize, c.osPageCacheBusyTimeOutMills) == (5000, 4 * 1024 * 1024, 1000)
    assert c.cleanResourceInterval == 10_000 and c.flushDiskType == "ASYNC_FLUSH"
    assert c.messageIndexEnable and c.cleanFileForciblyEnable and not c.transientStorePoolEnable
    assert c.retentionGuardGroups == ""


def test_hot_and_restart_keys_follow_the_spec():
    for k in (
        "fileReservedTime",
        "deleteWhen",
        "diskMaxUsedSpaceRatio",
        "diskSpaceCleanForciblyRatio",
        "diskSpaceWarningLevelRatio",
        "cleanFileForciblyEnable",
        "deleteFileBatchMax",
        "deleteCommitLogFilesInterval",
        "deleteConsumeQueueFilesInterval",
        "destroyMapedFileIntervalForcibly",
        "redeleteHangedFileInterval",
        "flushIntervalCommitLog",
        "flushCommitLogLeastPages",
        "flushCommitLogThoroughInterval",
        "syncFlushTimeout",
        "maxMessageSize",
        "messageIndexEnable",
    ):
        assert k in HOT_KEYS, k
    for k in (
        "mappedFileSizeCommitLog",
        "mappedFileSizeConsumeQueue",
        "maxHashSlotNum",
        "maxIndexNum",
        "cleanResourceInterval",
        "flushDiskType",
        "transientStorePoolEnable",
        "storePathCommitLog",
    ):
        assert k in RESTART_KEYS, k
    assert set(KEYS) == HOT_KEYS | RESTART_KEYS


@pytest.mark.parametrize(
    "settings,key,words",
    [
        ({"nope": 1}, "nope", "unknown"),
        ({"diskMaxUsedSpaceRatio": 9}, "diskMaxUsedSpaceRatio", ">= 10"),
        ({"diskSpaceWarningLevelRatio": 96}, "diskSpaceWarningLevelRatio", "<= 95"),
        ({"diskSpaceWarningLevelRatio": 80}, "diskSpaceWarningLevelRatio", ">= diskSpaceCleanForciblyRatio"),
        ({"diskMaxUsedSpaceRatio": 88}, "diskSpaceCleanForciblyRatio", ">= diskMaxUsedSpaceRatio"),
        ({"deleteWhen": "24"}, "deleteWhen", "hours 00-23"),
        ({"deleteWhen": "004"}, "deleteWhen", "hours 00-23"),
        ({"deleteWhen": ""}, "deleteWhen", "hours 00-23"),
        ({"deleteWhen": "03;x"}, "deleteWhen", "hours 00-23"),
        ({"mappedFileSizeCommitLog": 0}, "mappedFileSizeCommitLog", ">="),
        ({"fileReservedTime": "soon"}, "fileReservedTime", "integer"),
        ({"messageIndexEnable": "yes"}, "messageIndexEnable", "true or false"),
        ({"flushDiskType": "SOMETIMES"}, "flushDiskType", "SYNC_FLUSH"),
        ({"retentionGuardGroups": "ok;bad/group"}, "retentionGuardGroups", "illegal"),
    ],
)
def test_validation_names_the_key(settings, key, words):
    with pytest.raises(ConfigError) as e:
        StoreConfig(settings)
    assert e.value.key == key and words in str(e.value)


def test_strings_from_configmaps_are_coerced():
    c = StoreConfig({"fileReservedTime": "48", "messageIndexEnable": "false", "deleteWhen": "01;13;4", "retentionGuardGroups": "a;b"})
    assert c.fileReservedTime == 48 and c.messageIndexEnable is False
    assert c.delete_hours == frozenset({1, 13, 4}) and c.guard_groups == ("a", "b")
    assert parse_assignments(["a=1", "b = x "]) == {"a": "1", "b": "x"}
    with pytest.raises(ConfigError):
        parse_assignments(["novalue"])


def test_live_update_applies_hot_keys_and_reports_restart_keys(make_store, tmp_path):
    s = make_store()
    before = s.generation
    dry = s.update_config({"fileReservedTime": 1, "flushDiskType": "SYNC_FLUSH"}, dry_run=True)
    assert dry.dry_run and dry.applied == {"fileReservedTime": 1} and dry.restart_required == {"flushDiskType": "SYNC_FLUSH"}
    assert s.config.fileReservedTime == 72 and s.generation == before
    res = s.update_config({"fileReservedTime": 1, "flushDiskType": "SYNC_FLUSH"})
    assert res.applied == {"fileReservedTime": 1} and res.restart_required == {"flushDiskType": "SYNC_FLUSH"}
    assert s.config.fileReservedTime == 1 and s.config.flushDiskType == "ASYNC_FLUSH"  # not half-applied
    assert s.generation == before + 1
    assert s.status()["pending_restart"] == {"flushDiskType": "SYNC_FLUSH"}
    persisted = json.load(open(os.path.join(s.config_dir, "store.json")))
    assert persisted["values"]["fileReservedTime"] == 1 and persisted["generation"] == before + 1
    s.shutdown()
    s2 = make_store()
    assert s2.config.fileReservedTime == 1 and s2.config.flushDiskType == "SYNC_FLUSH"
    assert s2.generation == before + 1


def test_invalid_update_changes_nothing(make_store):
    s = make_store()
    with pytest.raises(ConfigError) as e:
        s.update_config({"fileReservedTime": 5, "diskSpaceWarningLevelRatio": 70})
    assert e.value.key == "diskSpaceWarningLevelRatio"
    assert s.config.fileReservedTime == 72 and s.generation == 0
    assert not os.path.exists(os.path.join(s.config_dir, "store.json"))


def test_ratio_order_is_checked_against_pending_restart_values_too(make_store):
    s = make_store()
    s.update_config({"diskMaxUsedSpaceRatio": 60})
    s.update_config({"diskSpaceCleanForciblyRatio": 70, "diskSpaceWarningLevelRatio": 80})
    assert (s.config.diskMaxUsedSpaceRatio, s.config.diskSpaceCleanForciblyRatio, s.config.diskSpaceWarningLevelRatio) == (60, 70, 80)


def test_explicit_start_settings_beat_persisted_ones(make_store):
    s = make_store(fileReservedTime=5)
    s.update_config({"fileReservedTime": 6, "deleteFileBatchMax": 3})
    s.shutdown()
    s2 = make_store(fileReservedTime=5)
    assert s2.config.fileReservedTime == 5  # the operator's ConfigMap / --set wins
    assert s2.config.deleteFileBatchMax == 3
