"""Issue 13, models of any size: weights are held once.  ONNX initializers are memory-mapped
(ge/onnx_weights.py), the .om is streamed with its checksum computed as it is written
(om_format.container.stream_om), the .om reader maps the file (codegen/om_import.py), and
a terminal shows the stages of a long compile (atc_py/progress_display.py).

The streaming path runs here on small models with its limits lowered (every initializer
mapped, chunks of 4 KB, the hashing thread used for every chunk): the .om bytes
must be exactly the golden zoo's.  Full-size figures (BERT-base, a 1B decoder, > 2 GB of
external data) are measured by bench/bench_memory.py.
"""
from __future__ import annotations

import hashlib
import io
import json
import mmap
import os
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import cli
from builder import Net
from codegen.om_import import load_om_graph
from ge import onnx_weights
from ge.errors import AtcError
from ge.limits import MAPPED_COPIES, Budget
from ge.onnx_import import import_model, load_model
from helpers import record_sha_updates
from om_format import container, weights
from sandbox import leftovers, run_tool
from test_golden_zoo import GOLDEN, fingerprint


def _map_base(array: np.ndarray):
    """The object at the bottom of `array`'s buffer chain (an mmap for a mapped weight)."""
    base = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return base.obj if isinstance(base, memoryview) else base


@pytest.fixture
def streaming_limits_lowered(monkeypatch):
    """Every initializer mapped, chunks of 4099 bytes (not a multiple of any alignment), every
    full chunk hashed on the second thread."""
    monkeypatch.setattr(onnx_weights, "MAP_MIN_BYTES", 0)
    monkeypatch.setattr(weights, "CHUNK_BYTES", 4099)
    monkeypatch.setattr(container, "CHUNK_BYTES", 4099)
    monkeypatch.setattr(container._HashingWriter, "_OVERLAP", 4099)
    monkeypatch.setattr(container, "_spare_core", lambda: True)
    mapped = []
    real = onnx_weights.skeleton

    def counting(buf, min_bytes=onnx_weights.MAP_MIN_BYTES):
        parsed, found = real(buf, min_bytes)
        mapped.append(len(found))
        return parsed, found

    monkeypatch.setattr(onnx_weights, "skeleton", counting)
    return mapped


@pytest.mark.parametrize("name", ["bert_base", "gpt2", "resnet50", "mobilenet_v2", "seed_testmodel"])
def test_streamed_om_of_mapped_weights_is_byte_identical_to_the_golden(name, streaming_limits_lowered):
    with open(GOLDEN, encoding="utf-8") as f:
        want = json.load(f)[f"{name}/force_fp16"]["om_sha256"]
    assert fingerprint(name, "force_fp16")["om_sha256"] == want
    assert streaming_limits_lowered and streaming_limits_lowered[0] > 0   # the weights were mapped


@pytest.mark.parametrize("name", ["gpt2", "seed_testmodel"])
def test_om_hashed_piece_by_piece_on_a_busy_machine_is_byte_identical(name, streaming_limits_lowered, monkeypatch):
    """With no core to spare the writer hashes and writes each chunk a piece at a time on one
    thread (pieces of 1000 bytes here, so a piece never lines up with a chunk): same bytes."""
    monkeypatch.setattr(container, "_spare_core", lambda: False)
    monkeypatch.setattr(container._HashingWriter, "_PIECE", 1000)
    pieces = []
    record_sha_updates(monkeypatch, lambda data: pieces.append(len(data)))
    with open(GOLDEN, encoding="utf-8") as f:
        want = json.load(f)[f"{name}/force_fp16"]["om_sha256"]
    assert fingerprint(name, "force_fp16")["om_sha256"] == want
    assert pieces and max(pieces) <= 4099 and 1000 in pieces    # chunks were split into pieces


def _weight_model(tmp_path, rows=256, cols=512, name="m"):
    net = Net()
    x = net.input("x", [1, rows])
    w = net.const(np.arange(rows * cols, dtype=np.float32).reshape(rows, cols) / (rows * cols))
    model = net.model(net.op("MatMul", x, w))
    path = tmp_path / f"{name}.onnx"
    onnx.save_model(model, str(path))
    return path, numpy_helper.to_array(model.graph.initializer[0])


def test_mapped_initializers_are_read_only_views_of_the_model_file(tmp_path):
    path, expected = _weight_model(tmp_path)
    loaded = load_model(str(path))
    assert len(loaded.weights) == 1 and loaded.weights.nbytes == expected.nbytes
    assert not loaded.proto.graph.initializer[0].raw_data          # protobuf never held the bytes
    graph = import_model(loaded)
    const = next(v.const for v in graph.values() if v.is_const and v.const.size == expected.size)
    assert isinstance(_map_base(const), mmap.mmap) and not const.flags.writeable
    np.testing.assert_array_equal(const, expected)


def test_small_initializers_are_parsed_not_mapped(tmp_path):
    path, _ = _weight_model(tmp_path, rows=4, cols=8)
    loaded = load_model(str(path))
    assert len(loaded.weights) == 0 and loaded.proto.graph.initializer[0].raw_data


def _compile(model_path, out_dir, *extra):
    os.makedirs(out_dir, exist_ok=True)
    rc = cli.main([f"--model={model_path}", "--framework=5", f"--output={out_dir}/m", "--soc_version=Ascend910", *extra])
    assert rc == 0
    return open(f"{out_dir}/m.om", "rb").read()


def test_external_data_is_mapped_and_compiles_to_the_same_bytes(tmp_path, capsys):
    path, _ = _weight_model(tmp_path)
    model = onnx.load(str(path))
    os.makedirs(tmp_path / "ext")
    onnx.save_model(model, str(tmp_path / "ext" / "m.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="m.data", size_threshold=0)
    loaded = load_model(str(tmp_path / "ext" / "m.onnx"))
    assert len(loaded.weights) == 1 and onnx_weights.token_of(loaded.proto.graph.initializer[0])
    assert _compile(path, tmp_path / "a") == _compile(tmp_path / "ext" / "m.onnx", tmp_path / "b")


def test_a_forged_mapping_token_is_refused(tmp_path):
    path, _ = _weight_model(tmp_path, rows=4, cols=8)
    model = onnx.load(str(path))
    tensor = model.graph.initializer[0]
    tensor.ClearField("raw_data")
    onnx_weights.mark(tensor, "0.0")
    onnx.save_model(model, str(path))
    with pytest.raises(AtcError) as err:
        load_model(str(path))
    assert err.value.code == "E16003" and onnx_weights.MAPPED_KEY in err.value.message


def test_mapped_bytes_that_disagree_with_the_dims_are_refused(tmp_path):
    path, _ = _weight_model(tmp_path)
    model = onnx.load(str(path))
    model.graph.initializer[0].dims[0] = 300            # 300 x 512 floats, 256 x 512 stored
    path.write_bytes(model.SerializeToString())
    with pytest.raises(AtcError) as err:
        import_model(load_model(str(path)))
    assert err.value.code == "E16001" and "data bytes" in err.value.message


def test_wire_format_the_walker_does_not_follow_is_parsed_whole(tmp_path):
    """A graph field given twice (protobuf merges the two): the walker steps aside and
    protobuf parses the file as before."""
    path, expected = _weight_model(tmp_path)
    model = onnx.load(str(path))
    extra = onnx.ModelProto()
    extra.graph.doc_string = "second graph field"
    path.write_bytes(model.SerializeToString() + extra.SerializeToString())
    with pytest.raises(onnx_weights.WireFormatUnsupported):
        onnx_weights.skeleton(path.read_bytes(), 0)
    loaded = load_model(str(path))
    assert len(loaded.weights) == 0 and loaded.proto.graph.doc_string == "second graph field"
    np.testing.assert_array_equal(numpy_helper.to_array(loaded.proto.graph.initializer[0]), expected)


@pytest.mark.parametrize("cut", [1, 100, 2000])
def test_truncated_file_is_a_parse_error_not_a_crash(tmp_path, cut):
    path, _ = _weight_model(tmp_path)
    path.write_bytes(path.read_bytes()[:-cut])
    with pytest.raises(AtcError) as err:
        load_model(str(path))
    assert err.value.code == "E16001"


def test_om_loads_without_copying_its_weights(tmp_path):
    path, expected = _weight_model(tmp_path)
    _compile(path, tmp_path / "out")
    loaded = load_om_graph(str(tmp_path / "out" / "m.om"))
    consts = [v.const for v in loaded.graph.values() if v.is_const and v.const.size == expected.size]
    assert consts and all(isinstance(_map_base(c), mmap.mmap) and not c.flags.writeable for c in consts)
    np.testing.assert_array_equal(consts[0], expected)


@pytest.mark.parametrize("precision", ["force_fp16", "force_fp32"])
def test_the_simulator_s_prepared_plan_keeps_weights_mapped_over_its_conversion_cap(tmp_path, monkeypatch,
                                                                                  precision):
    """Past PREPARED_CONVERSION_BYTES (lowered to 0 here) a constant stays a view of the mapped
    .om and each forward converts it, as when nothing is prepared: same numbers either way."""
    from simulator import executor, runner
    path, _ = _weight_model(tmp_path)
    _compile(path, tmp_path / "out", f"--precision_mode={precision}")
    om = str(tmp_path / "out" / "m.om")
    feeds = {"x": np.linspace(-1, 1, 256, dtype=np.float32).reshape(1, 256)}
    expected = executor.execute(runner.load_model(om).plan, feeds)
    monkeypatch.setattr(executor, "PREPARED_CONVERSION_BYTES", 0)
    plan = runner.load_model(om).plan
    consts = [arg[1] for step in plan.steps for arg in step.args if arg is not None and arg[0] is not False]
    assert consts and all(isinstance(_map_base(c), mmap.mmap) for c in consts if c.size == 256 * 512)
    got = executor.execute(plan, feeds)
    assert got.keys() == expected.keys()
    for name in got:
        np.testing.assert_array_equal(got[name], expected[name])
    assert plan.workspace.grown == 0          # those conversions were planned in the workspace at load


def test_a_failed_write_leaves_no_om_and_no_temp_file(tmp_path, monkeypatch, capsys):
    path, _ = _weight_model(tmp_path)

    def full_disk(self, size=None):
        yield memoryview(b"x" * 64)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(weights.WeightsBuilder, "chunks", full_disk)
    rc = cli.main([f"--model={path}", "--framework=5", f"--output={tmp_path}/out/m", "--soc_version=Ascend910"])
    assert rc == 1 and "E13004" in capsys.readouterr().out
    assert not os.path.exists(tmp_path / "out") and leftovers(str(tmp_path)) == []


def test_budget_counts_mapped_weights_against_the_address_space():
    budget = Budget(host_bytes=1 << 40, address_bytes=1000)
    budget.check_mapped(1000 // (1 + MAPPED_COPIES), "fits")
    with pytest.raises(AtcError) as err:
        budget.check_mapped(1000 // (1 + MAPPED_COPIES) + 1, "Weights")
    assert err.value.code == "E13023" and "ulimit -v" in err.value.message
    with pytest.raises(AtcError):      # and the copies fusions may make count against memory
        Budget(host_bytes=100, address_bytes=None).check_mapped(101 // MAPPED_COPIES + 1, "Weights")


def _matmuls(tmp_path, name, width, count):
    """`count` MatMuls of [1, width] x [width, 2*width] float32 weights, each a different value;
    every other weight is stored transposed behind a Transpose node (folded at compile time)."""
    net = Net()
    x = net.input("x", [1, width])
    outs = []
    for k in range(count):
        if k % 2:
            weight = net.op("Transpose", net.const(np.full((2 * width, width), k + 1, np.float32)), perm=[1, 0])
        else:
            weight = net.const(np.full((width, 2 * width), k + 1, np.float32))
        outs.append(net.op("MatMul", x, weight))
    path = tmp_path / f"{name}.onnx"
    onnx.save_model(net.model(*outs), str(path))
    return path, count * width * 2 * width * 4


def test_compile_holds_the_weights_at_most_once(tmp_path):
    """Peak RSS of a compile of 128 MiB of weights, less that of a tiny model, stays below the
    weights' size (before weights were mapped it was about 5x them), although folding the
    Transposes copies half of them."""
    small, _ = _matmuls(tmp_path, "small", 16, 4)
    big, weight_bytes = _matmuls(tmp_path, "big", 2048, 4)
    runs = {}
    for name, model in (("small", small), ("big", big)):
        result = run_tool("atc", [f"--model={model}", "--framework=5", f"--output={tmp_path}/{name}",
                                  "--soc_version=Ascend910"], str(tmp_path), timeout=120)
        assert result.verdict == "ok", result.text[-2000:]
        runs[name] = result.max_rss_mb
    os.remove(tmp_path / "big.om")
    assert (runs["big"] - runs["small"]) * (1 << 20) < 1.0 * weight_bytes, runs


def test_map_of_finds_the_map_under_views_of_a_mapped_file(tmp_path):
    """The .om writer drops the pages of the maps it wrote from: each chunk is traced back
    to its map through memoryview slices and numpy views; other memory has no map."""
    from ge.files import map_input, map_of
    path = tmp_path / "w.bin"
    path.write_bytes(np.arange(4096, dtype=np.float32).tobytes())
    mapped = map_input(str(path), "--model")
    array = np.frombuffer(mapped.view(64, 1024), np.float32).reshape(16, 16)
    chunk = weights.byte_view(array)[128:512]
    assert map_of(chunk) is map_of(mapped.view(0, 8)) is not None
    assert map_of(weights.byte_view(np.ones(4, np.float32))) is None and map_of(memoryview(b"abc")) is None


def test_a_measured_tool_does_not_inherit_the_measuring_process_s_memory():
    """A process that once held 256 MB starts a tiny one: its peak is its own, not 256 MB
    (a plain fork/exec would report this process's peak), and a child that does allocate
    256 MB is measured at that."""
    import sys
    from bench import peak_rss
    held = bytearray(256 << 20)
    held[::4096] = b"x" * len(held[::4096])      # touched: resident
    del held
    rc, _, tiny, cpu, out = peak_rss.run([sys.executable, "-S", "-c", "print('ok')"])
    assert rc == 0 and out == b"ok\n" and cpu is not None and tiny < 64 << 20, tiny
    rc, _, big, _, _ = peak_rss.run([sys.executable, "-S", "-c", "b = bytearray(256 << 20); b[::4096] = b'x' * 65536"])
    assert rc == 0 and big > 256 << 20, big


# --------------------------------------------------------------------------- progress

class _Terminal(io.StringIO):
    def isatty(self):
        return True


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_progress_appears_only_after_the_delay_and_is_erased():
    from atc_py.progress_display import TerminalProgress
    screen, clock = _Terminal(), _Clock()
    shown = TerminalProgress(screen, delay=3.0, interval=0.0, clock=clock)
    shown.stage("Fusion passes", 4)
    shown.update(1)
    assert screen.getvalue() == ""                      # a short compile prints nothing
    clock.now = 3.5
    shown.update(2)
    assert screen.getvalue().endswith("Fusion passes:  50%")
    shown.stage("Writing m.om")
    assert screen.getvalue().endswith("\rWriting m.om..." + " " * 4)   # what was longer is blanked
    shown.update(30, 40)
    assert screen.getvalue().endswith("\rWriting m.om:  75%")
    shown.close()
    assert screen.getvalue().endswith("\r" + " " * len("Writing m.om:  75%") + "\r")


def test_progress_needs_a_terminal(monkeypatch):
    from atc_py.progress_display import TerminalProgress
    from ge.progress import Progress
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert type(TerminalProgress.for_stderr()) is Progress
    monkeypatch.setattr("sys.stderr", _Terminal())
    assert isinstance(TerminalProgress.for_stderr(), TerminalProgress)


def test_atc_progress_goes_to_stderr_and_leaves_stdout_as_it_was(tmp_path, monkeypatch, capsys):
    from atc_py import progress_display
    path, _ = _weight_model(tmp_path)
    args = [f"--model={path}", "--framework=5", f"--output={tmp_path}/m", "--soc_version=Ascend910", "--log=info"]
    assert cli.main(args) == 0
    plain = capsys.readouterr()
    assert plain.err == ""
    terminal = _Terminal()
    monkeypatch.setattr(progress_display, "DELAY_SECONDS", 0.0)
    monkeypatch.setattr(progress_display, "INTERVAL_SECONDS", 0.0)
    monkeypatch.setattr("sys.stderr", terminal)
    assert cli.main(args) == 0
    assert capsys.readouterr().out == plain.out
    shown = terminal.getvalue()
    for stage in ("Loading the model", "Shapes and constants: 100%", "Fusion passes: 100%",
                  f"Writing {tmp_path}/m.om: 100%"):
        assert stage in shown, shown
    assert shown.endswith("\r")      # erased at the end


def test_old_opsets_and_the_pre_check_read_mapped_weights(tmp_path, monkeypatch, capsys):
    """An opset-11 model goes through onnx's version converter, which needs its weights
    inline (they are copied in for it); --mode=3 imports the model as a compile does."""
    net = Net(opset=11)
    x = net.input("x", [1, 64])
    y = net.op("Relu", net.op("MatMul", x, net.rand(64, 96)))
    onnx.save_model(net.model(y), str(tmp_path / "old.onnx"))
    unmapped = _compile(tmp_path / "old.onnx", tmp_path / "a")
    monkeypatch.setattr(onnx_weights, "MAP_MIN_BYTES", 0)
    assert len(load_model(str(tmp_path / "old.onnx")).weights) == 1
    assert _compile(tmp_path / "old.onnx", tmp_path / "b") == unmapped
    rc = cli.main([f"--model={tmp_path / 'old.onnx'}", "--framework=5", "--mode=3",
                   f"--check_report={tmp_path / 'check.json'}"])
    assert rc == 0, capsys.readouterr().out
    report = json.loads((tmp_path / "check.json").read_text())
    assert report["summary"]["graph"]["result"] == "success"


# --------------------------------------------------------------------------- deferred constants

def test_column_concat_streams_the_packed_bytes_without_packing_them_whole():
    """A deferred [K, 2I] weight gives np.concatenate's bytes chunk by chunk (whole rows per
    chunk, one shared buffer), any byte range of them, and its values when asked."""
    from ge.deferred import ColumnConcat
    rng = np.random.default_rng(0)
    gate, up = rng.standard_normal((37, 24), np.float32), rng.standard_normal((37, 40), np.float32)[:, ::-1][:, 8:]
    packed = ColumnConcat([gate, up])
    want = np.concatenate([gate, up], axis=1)
    assert packed.shape == want.shape and packed.dtype == want.dtype and packed.nbytes == want.nbytes
    for size in (1, 200, 4099, 1 << 20):
        chunks = [bytes(c) for c in packed.chunks(size)]
        assert b"".join(chunks) == want.tobytes()
        assert all(len(c) % (want.shape[1] * 4) == 0 for c in chunks)
    raw = want.tobytes()
    for start, stop in ((0, 1), (5, 900), (255, 256), (len(raw) - 3, len(raw) + 10), (100, 100)):
        assert packed.byte_range(start, stop) == raw[start:stop]
    np.testing.assert_array_equal(np.asarray(packed), want)
    with pytest.raises(ValueError):
        ColumnConcat([gate, up[:5]])
    with pytest.raises(ValueError):
        ColumnConcat([gate, up.astype(np.float16)])


def test_a_deferred_chunk_stays_valid_until_its_ring_buffer_comes_round_again():
    """The .om writer may still be hashing up to CHUNKS_IN_FLIGHT chunks on its second thread
    while later ones are computed: a partition's deferred chunks take turns in one ring of
    CHUNKS_IN_FLIGHT + 1 buffers, shared by all its deferred arrays (allocated once)."""
    from ge.deferred import ColumnConcat
    rng = np.random.default_rng(3)
    parts = [(rng.standard_normal((40, 8), np.float32), rng.standard_normal((40, 8), np.float32)) for _ in range(2)]
    row = 16 * 4
    builder = weights.WeightsBuilder()
    for gate, up in parts:
        builder.add(ColumnConcat([gate, up]))
    want = b"".join(np.concatenate(p, axis=1).tobytes() for p in parts)
    assert builder.nbytes == len(want)                       # both arrays 64-byte aligned: no padding
    depth = weights.CHUNKS_IN_FLIGHT
    seen, buffers = [], set()
    position = 0
    for k, chunk in enumerate(builder.chunks(3 * row)):
        seen.append((chunk, position))
        position += len(chunk)
        buffers.add(np.frombuffer(chunk, np.uint8).__array_interface__["data"][0])
        for old, at in seen[-depth - 1:]:                    # the last CHUNKS_IN_FLIGHT + 1 are intact
            assert bytes(old) == want[at:at + len(old)]
    assert position == len(want) and len(seen) > 2 * (depth + 1)
    assert len(buffers) == depth + 1                         # one ring for both arrays
    stale = seen[0][0]
    assert bytes(stale) != want[:len(stale)]                 # the first buffer was reused, as the ring says


def test_the_writer_runs_up_to_in_flight_chunks_ahead_of_the_hash():
    """With a core to spare, write() returns while its chunk is still being hashed, and goes
    on writing the next ones: it waits only when IN_FLIGHT chunks are written and unhashed.
    SHA-256 still gets the bytes in file order, and a chunk is reported done (the driver then
    drops its mapped pages) only once it is hashed, in order."""
    import hashlib
    import threading
    depth = container._HashingWriter.IN_FLIGHT
    gate = threading.Semaphore(0)                  # one release = one chunk may be hashed
    fed, told, progress = [], [], []

    class GatedSha:
        def __init__(self):
            self._sha = hashlib.sha256()

        def update(self, data):
            assert gate.acquire(timeout=10)
            fed.append(bytes(data))
            self._sha.update(data)

        def digest(self):
            return self._sha.digest()

    class Sink(io.BytesIO):
        def write(self, data):
            self.count = getattr(self, "count", 0) + len(data)
            return super().write(data)

    def on_chunk(chunk):
        assert bytes(chunk) in fed                 # never before its hash is done
        told.append(bytes(chunk)[:1])

    chunks = [bytes([k]) * (1 << 20) for k in range(depth + 3)]
    out = Sink()
    writer = container._HashingWriter(out, sum(map(len, chunks)), lambda done, total: progress.append(done),
                                      on_chunk, threaded=True)
    writer.sha = GatedSha()
    returned = []

    def feed():
        for chunk in chunks:
            writer.write(memoryview(chunk))
            returned.append(len(returned))

    feeder = threading.Thread(target=feed)
    feeder.start()
    deadline = time.monotonic() + 10
    while getattr(out, "count", 0) < (depth + 1) << 20 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    assert out.count == (depth + 1) << 20         # depth + 1 chunks written with none hashed,
    assert len(returned) == depth and not fed and not told   # and the last of them waits for a hash
    gate.release()
    deadline = time.monotonic() + 10
    while len(returned) < depth + 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(returned) == depth + 1 and told == [b"\0"]    # one hash done: one chunk reported
    for _ in chunks:
        gate.release()
    feeder.join(10)
    writer.close()
    assert fed == chunks and out.getvalue() == b"".join(chunks)
    assert writer.sha.digest() == hashlib.sha256(b"".join(chunks)).digest()
    assert told == [c[:1] for c in chunks] and progress == [(k + 1) << 20 for k in range(len(chunks))]


def test_the_writer_raises_what_its_hashing_thread_raised():
    class Failing:
        def update(self, data):
            raise MemoryError("no room")

    writer = container._HashingWriter(io.BytesIO(), 0, threaded=True)
    writer.sha = Failing()
    with pytest.raises(MemoryError):
        for _ in range(3 * container._HashingWriter.IN_FLIGHT):
            writer.write(memoryview(bytes(1 << 20)))
        writer.close()
    writer.close()                                 # and closes (the thread ended) without hanging


def test_a_chunk_hashed_on_the_second_thread_is_written_a_piece_at_a_time():
    """One write() of a 16 MiB chunk costs this machine's kernel 3.5x what 256 KiB writes of
    the same bytes do (the I/O floor's two buffer sizes, bench/RESULTS.md): while the second
    thread hashes the whole chunk, the file gets it in pieces of at most _PIECE bytes."""
    class Recorder(io.BytesIO):
        sizes: list = []

        def write(self, data):
            self.sizes.append(len(data))
            return super().write(data)

    out = Recorder()
    piece = container._HashingWriter._PIECE
    chunk = bytes(range(256)) * (container._HashingWriter._OVERLAP // 256 + 1)      # the threaded path
    assert len(chunk) % piece
    writer = container._HashingWriter(out, len(chunk), threaded=True)
    writer.write(memoryview(chunk))
    writer.close()
    assert out.getvalue() == chunk and writer.sha.digest() == hashlib.sha256(chunk).digest()
    assert len(out.sizes) == -(-len(chunk) // piece) and max(out.sizes) <= piece

def test_weights_builder_writes_and_shares_deferred_arrays_like_arrays(monkeypatch):
    """A deferred array lands at the same offset, with the same bytes and the same sharing,
    as the array it stands for: the partition is byte-identical."""
    from ge.deferred import ColumnConcat
    monkeypatch.setattr(weights, "_PROBE", 64)           # arrays longer than the probes
    monkeypatch.setattr(weights, "_GROUP_BY_DIGEST", 2)  # and crowded fingerprint groups
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((64, 16), np.float32), rng.standard_normal((64, 16), np.float32)
    twin = b.copy()
    twin[30, 3] += 1                                     # differs in no probe: only the full compare tells
    items = [ColumnConcat([a, b]), np.ones(5, np.float32), ColumnConcat([a, b]), np.concatenate([a, b], axis=1),
             ColumnConcat([a, twin]), ColumnConcat([a, twin]), np.concatenate([a, twin], axis=1)]
    deferred, eager = weights.WeightsBuilder(), weights.WeightsBuilder()
    places = [deferred.add(x) for x in items]
    assert places == [eager.add(np.asarray(x)) for x in items]
    assert places[0] == places[2] == places[3] and places[4] == places[5] == places[6] != places[0]
    assert deferred.bytes() == eager.bytes()
    assert b"".join(bytes(c) for c in deferred.chunks(100)) == eager.bytes()


def _gated_mlp_model(tmp_path, hidden=64, inner=192):
    """x -> SiLU(x @ Wg) * (x @ Wu) -> @ Wd: a decoder's gated MLP, packed by GatedMLP."""
    rng = np.random.default_rng(2)
    net = Net()
    x = net.input("x", [4, hidden])
    gate = net.op("MatMul", x, net.const(rng.standard_normal((hidden, inner), np.float32)))
    up = net.op("MatMul", x, net.const(rng.standard_normal((hidden, inner), np.float32)))
    act = net.op("Mul", gate, net.op("Sigmoid", gate))
    out = net.op("MatMul", net.op("Mul", act, up), net.const(rng.standard_normal((inner, hidden), np.float32)))
    path = tmp_path / "gated.onnx"
    onnx.save_model(net.model(out), str(path))
    return path


def test_gated_mlp_weights_are_packed_while_the_om_is_written_not_before(tmp_path, monkeypatch,
                                                                          streaming_limits_lowered):
    """The packed gate|up weight is never computed whole during a compile (it is written from
    the mapped weights, row block by row block), and the .om is byte for byte the one an
    eagerly packed weight gives; the simulator computes it when it runs the .om."""
    from ge.deferred import ColumnConcat
    path = _gated_mlp_model(tmp_path)

    def refuse(self):
        raise AssertionError("the packed weight was computed whole during the compile")

    real, streamed = ColumnConcat.materialize, []
    real_chunks = ColumnConcat.chunks

    def counted_chunks(self, size, ring=None):
        streamed.append(self.shape)
        return real_chunks(self, size, ring)

    monkeypatch.setattr(ColumnConcat, "materialize", refuse)
    monkeypatch.setattr(ColumnConcat, "chunks", counted_chunks)
    deferred = _compile(path, tmp_path / "deferred")
    assert streamed == [(64, 384)]                      # the packed weight went to the .om deferred
    eager_chunks = lambda self, size, ring=None: iter([memoryview(real(self).reshape(-1).view(np.uint8))])   # noqa: E731
    monkeypatch.setattr(ColumnConcat, "chunks", eager_chunks)
    assert _compile(path, tmp_path / "eager") == deferred
    loaded = load_om_graph(str(tmp_path / "deferred" / "m.om")).graph
    assert "MatMulBiasSwiGluFusionOp" in {n.op_type for n in loaded.nodes}


def test_a_packed_weight_written_far_ahead_of_a_slow_hash_gives_the_same_bytes(tmp_path, monkeypatch,
                                                                               streaming_limits_lowered):
    """The writer runs up to IN_FLIGHT chunks ahead of the hashing thread, and the packed
    weight's chunks are made in a ring of reused buffers: with a hash slow enough that the
    writer always runs that far ahead, the .om (its checksum included) is still byte for byte
    the one a hash on the writing thread gives -- no chunk is overwritten before it is hashed."""
    import threading
    monkeypatch.setattr(container._HashingWriter, "_OVERLAP", 1)      # every chunk to the hashing thread
    path = _gated_mlp_model(tmp_path)
    behind = []
    record_sha_updates(monkeypatch, lambda data: behind.append(threading.current_thread() is not threading.main_thread())
                       or time.sleep(0.003))
    slow = _compile(path, tmp_path / "slow")
    assert sum(behind) > 3 * container._HashingWriter.IN_FLIGHT      # hashed on the second thread
    monkeypatch.setattr(container, "_spare_core", lambda: False)
    assert _compile(path, tmp_path / "inline") == slow
    om = container.read_om(slow)                                       # and the checksum holds
    assert om.header.checksum[:32] == hashlib.sha256(slow[container.HEADER_SIZE:]).digest()


def test_maps_of_follows_a_deferred_chunk_to_its_parts_maps(tmp_path):
    """The writer drops the pages a deferred constant's chunk was packed from."""
    from ge.deferred import ColumnConcat
    from ge.files import map_input, maps_of
    path = tmp_path / "w.bin"
    path.write_bytes(np.arange(4096, dtype=np.float32).tobytes())
    mapped = map_input(str(path), "--model")
    part = np.frombuffer(mapped.view(0, 4096), np.float32).reshape(32, 32)
    chunk = next(ColumnConcat([part, np.ones((32, 8), np.float32)]).chunks(1024))
    assert [id(m) for m in maps_of(chunk)] == [id(m) for m in maps_of(weights.byte_view(part))] != []
    assert maps_of(memoryview(b"abc")) == [] and maps_of(weights.byte_view(np.ones(4, np.float32))) == []
