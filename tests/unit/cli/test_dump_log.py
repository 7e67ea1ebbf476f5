"""``tidelog dump-log`` on segment files written by tidelog's storage (a Log with every
codec, an idempotent producer, a transaction and its ABORT marker), and on hand-damaged
copies: Kafka's lines, problems on stderr naming the byte position, exit 1, no traceback."""

from __future__ import annotations

import re
import shutil
import struct
from pathlib import Path

import pytest

from tidelog.cli.main import main
from tidelog.client.records import Record, build_batch, build_control_batch
from tidelog.protocol.records import Compression
from tidelog.storage.log import Log, LogConfig
from tidelog.storage.producer_state import AppendOrigin

NAME = "00000000000000000000"


@pytest.fixture(scope="module")
def segment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A closed log's directory: 5 batches of 3 records (none, gzip, snappy, lz4, zstd), a
    transactional batch and its ABORT marker; an index entry every 100 bytes."""
    root = tmp_path_factory.mktemp("dump")
    log = Log.open(root / "t-0", LogConfig(index_interval_bytes=100), now_ms=0)
    for i, codec in enumerate(Compression):
        records = [
            Record(
                b"v%d-%d" % (i, j),
                key=None if j == 2 else b"k%d" % j,
                headers=[("h", b"x"), ("g", None)] if j == 0 else [],
                timestamp_ms=1_000 + 10 * i + j,
            )
            for j in range(3)
        ]
        log.append_as_leader(build_batch(records, compression=codec), leader_epoch=2, now_ms=0)
    log.append_as_leader(
        build_batch(
            [Record(b"txn", timestamp_ms=1_100)],
            producer_id=5,
            producer_epoch=1,
            base_sequence=7,
            is_transactional=True,
        ),
        leader_epoch=2,
        now_ms=0,
    )
    log.append_as_leader(
        build_control_batch(5, 1, False, 3, 2_000),
        leader_epoch=2,
        now_ms=0,
        origin=AppendOrigin.COORDINATOR,
    )
    log.close()
    return root / "t-0"


def dump(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, list[str], list[str]]:
    code = main(["dump-log", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def damaged(segment: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "t-0"
    shutil.copytree(segment, copy)
    return copy


def test_log_batches_and_records(segment: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = dump(capsys, segment / f"{NAME}.log", "--print-data-log")
    assert (code, err) == (0, [])
    assert out[0] == f"Dumping {segment / NAME}.log"
    assert out[1] == "Log starting offset: 0"
    batches = [line for line in out if line.startswith("baseOffset:")]
    assert [re.search(r"compresscodec: (\w+)", b)[1] for b in batches] == [  # type: ignore[index]
        "none",
        "gzip",
        "snappy",
        "lz4",
        "zstd",
        "none",
        "none",
    ]
    assert batches[0].startswith(
        "baseOffset: 0 lastOffset: 2 count: 3 baseSequence: -1 lastSequence: -1 "
        "producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 2 isTransactional: false "
        "isControl: false deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1002 "
    )
    assert all(b.endswith("isvalid: true") for b in batches)
    assert re.search(r"size: \d+ magic: 2 compresscodec: none crc: \d+ isvalid: true$", batches[0])
    assert batches[5].startswith(
        "baseOffset: 15 lastOffset: 15 count: 1 baseSequence: 7 lastSequence: 7 producerId: 5 "
        "producerEpoch: 1 partitionLeaderEpoch: 2 isTransactional: true isControl: false"
    )
    assert "isControl: true" in batches[6]
    records = [line for line in out if line.startswith("|")]
    assert records[0] == (
        "| offset: 0 CreateTime: 1000 keySize: 2 valueSize: 4 sequence: -1 headerKeys: [h,g] "
        "key: k0 payload: v0-0"
    )
    assert records[2] == (
        "| offset: 2 CreateTime: 1002 keySize: -1 valueSize: 4 sequence: -1 headerKeys: [] "
        "payload: v0-2"
    )
    assert records[13] == (
        "| offset: 13 CreateTime: 1041 keySize: 2 valueSize: 4 sequence: -1 headerKeys: [] "
        "key: k1 payload: v4-1"
    )
    assert records[15] == (
        "| offset: 15 CreateTime: 1100 keySize: -1 valueSize: 3 sequence: 7 headerKeys: [] "
        "payload: txn"
    )
    assert records[16] == (
        "| offset: 16 CreateTime: 2000 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
        "endTxnMarker: ABORT coordinatorEpoch: 3"
    )
    assert len(records) == 17


def test_batches_only_and_max_bytes(segment: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = dump(capsys, segment / f"{NAME}.log")
    assert code == 0
    assert not [line for line in out if line.startswith("|")]
    sizes = [int(re.search(r"size: (\d+)", b)[1]) for b in out[2:]]  # type: ignore[index]
    code, out, err = dump(
        capsys, segment / f"{NAME}.log", "--max-bytes", str(sizes[0] + sizes[1] + 5)
    )
    assert (code, err) == (0, [])
    assert len([line for line in out if line.startswith("baseOffset:")]) == 2


def test_indexes(segment: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = dump(
        capsys,
        segment / f"{NAME}.index",
        segment / f"{NAME}.timeindex",
        segment / f"{NAME}.txnindex",
    )
    assert (code, err) == (0, [])
    index = out[1 : out.index(f"Dumping {segment / NAME}.timeindex")]
    assert index
    assert all(re.fullmatch(r"offset: \d+ position: \d+", line) for line in index)
    assert "timestamp: 2000 offset: 16" in out
    assert out[-1] == (
        "version: 0 producerId: 5 firstOffset: 15 lastOffset: 16 lastStableOffset: 17"
    )
    code, out, err = dump(
        capsys, "--index-sanity-check", segment / f"{NAME}.index", segment / f"{NAME}.timeindex"
    )
    assert (code, err) == (0, [])
    assert f"{segment / NAME}.index passed sanity check." in out
    assert f"{segment / NAME}.timeindex passed sanity check." in out


def test_truncated_log(segment: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = damaged(segment, tmp_path)
    log_file = copy / f"{NAME}.log"
    size = log_file.stat().st_size
    with log_file.open("r+b") as f:
        f.truncate(size - 20)
    code, out, err = dump(capsys, log_file)
    assert code == 1
    assert len([line for line in out if line.startswith("baseOffset:")]) == 6
    last_start = size - 78  # the marker batch (78 bytes) was cut
    assert err == [
        f"Found 58 invalid bytes at the end of {NAME}.log: at position {last_start}, "
        "the batch header is truncated after 58 bytes"
    ]


def test_corrupt_byte_in_a_compressed_batch(
    segment: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = damaged(segment, tmp_path)
    log_file = copy / f"{NAME}.log"
    _, out, _ = dump(capsys, log_file)
    snappy = next(line for line in out if "compresscodec: snappy" in line)
    position = int(re.search(r"position: (\d+)", snappy)[1])  # type: ignore[index]
    data = bytearray(log_file.read_bytes())
    data[position + 70] ^= 0xFF  # inside the compressed records
    log_file.write_bytes(bytes(data))
    code, out, err = dump(capsys, log_file, "--deep-iteration")
    assert code == 1
    assert "compresscodec: snappy" in next(line for line in out if "isvalid: false" in line)
    assert err[0] == f"batch at position {position} (offset 6) fails its CRC-32C check"
    assert err[1].startswith(f"batch at position {position} (offset 6): its records cannot be read")
    assert len(err) == 2  # no spurious "Non-consecutive offsets" for the lost records


def test_bad_magic_and_garbage_tail(
    segment: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = damaged(segment, tmp_path)
    log_file = copy / f"{NAME}.log"
    data = bytearray(log_file.read_bytes())
    first_size = struct.unpack_from(">i", data, 8)[0] + 12
    data[first_size + 16] = 1  # the second batch's magic
    log_file.write_bytes(bytes(data))
    code, out, err = dump(capsys, log_file)
    assert code == 1
    assert len([line for line in out if line.startswith("baseOffset:")]) == 1
    assert err == [
        f"Found {len(data) - first_size} invalid bytes at the end of {NAME}.log: at position "
        f"{first_size}, the batch there has magic 1, not 2"
    ]


def test_index_problems(segment: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = damaged(segment, tmp_path)
    index = copy / f"{NAME}.index"
    entries = index.read_bytes()
    # Entry 1 now points at the wrong batch: the dump reports the mismatch.
    wrong = entries[:8] + struct.pack(">ii", 9, struct.unpack_from(">i", entries, 12)[0])
    index.write_bytes(wrong + entries[16:])
    code, out, err = dump(capsys, index)
    assert code == 1
    assert "offset: 9 position:" in out[2]
    assert err[0] == f"Mismatches in :{index}"
    assert re.fullmatch(r"  Index offset: 9, log offset: \d+", err[1])
    # Offsets out of order fail the sanity check (a broker would rebuild this index).
    index.write_bytes(entries[8:16] + entries[:8] + entries[16:])
    code, out, err = dump(capsys, "--index-sanity-check", index)
    assert code == 1
    assert "passed" not in "\n".join(out)
    assert re.match(
        r"entry 1 at byte 8 \(offset \d+, position \d+\): the offset is not above", err[0]
    )
    # A torn entry.
    index.write_bytes(entries + b"\x00\x01\x02")
    code, _out, err = dump(capsys, "--index-sanity-check", index)
    assert code == 1
    assert err == [
        f"Index file {index} is corrupt, found {len(entries) + 3} bytes which is neither "
        "positive nor a multiple of 8."
    ]


def test_time_index_problems(
    segment: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = damaged(segment, tmp_path)
    time_index = copy / f"{NAME}.timeindex"
    entries = time_index.read_bytes()
    timestamp, relative = struct.unpack_from(">qi", entries, 0)
    time_index.write_bytes(struct.pack(">qi", timestamp + 1, relative) + entries[12:])
    code, _out, err = dump(capsys, time_index)
    assert code == 1
    assert err == [
        f"Found timestamp mismatch in :{time_index}",
        f"  Index timestamp: {timestamp + 1}, log timestamp: {timestamp}",
    ]
    time_index.write_bytes(entries + entries[:12])
    code, _out, err = dump(capsys, "--index-sanity-check", time_index)
    assert code == 1
    assert "the timestamp is not above the previous entry's 2000" in err[0]


def test_txn_index_problems(
    segment: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = damaged(segment, tmp_path)
    txn = copy / f"{NAME}.txnindex"
    entry = txn.read_bytes()
    txn.write_bytes(entry + entry)  # the same marker twice: out of order
    code, out, err = dump(capsys, txn)
    assert code == 1
    assert out[1].startswith("version: 0 producerId: 5 firstOffset: 15")
    assert err == [f"{txn} is corrupt at byte 34: entry 1 (5, 15, 16, 17) is out of order"]


def test_missing_and_unknown_files(
    segment: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _out, err = dump(capsys, tmp_path / f"{NAME}.log")
    assert code == 1
    assert err == [f"cannot read {tmp_path / NAME}.log: no such file"]
    code, _out, err = dump(capsys, segment / "leader-epoch-checkpoint")
    assert code == 0  # Kafka passes over files it does not know
    assert err == [f"Ignoring unknown file {segment / 'leader-epoch-checkpoint'}"]
    odd = tmp_path / "segment.log"
    odd.write_bytes(b"")
    code, _out, err = dump(capsys, odd)
    assert code == 1
    assert err == [f"cannot read {odd}: the name is not <base offset>.log"]
