"""What the benchmarks write, read back: the size of a PNG figure, and the rows of the host-overhead
table (the host-overhead benchmark prints them; the README shows the kept measurement's)."""
import statistics
import struct

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
BARE = "bare tf.function loop"  # the host-overhead benchmark's baseline


def png_size(path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk, after checking the signature and that it decodes."""
    from PIL import Image

    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR", f"{path} is not a PNG"
    with Image.open(path) as image:
        image.load()  # decodes every pixel: a truncated or corrupt file fails here
    return struct.unpack(">II", data[16:24])


def table_cells(report: dict) -> list[str]:
    """The host-overhead table's figures, one row per loop: median, median ratio, lowest ratio."""
    return [f"| {median:,.1f} | {statistics.median(ratios):.3f}x | {min(ratios):.3f}x |"
            for median, ratios in zip(report["medians"].values(), report["ratios"].values(), strict=True)]
