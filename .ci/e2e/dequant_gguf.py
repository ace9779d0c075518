"""Rewrite a quantized GGUF model with F16 weights: `python dequant_gguf.py IN OUT`.

Why: the prebuilt llama-server CPU backend used by .ci/peers-llm.sh runs its quantized dot
products with AVX-VNNI instructions, which some x86 CPUs (AMD Zen 4 for one) lack (SIGILL).
F16 weights take the F16C/FMA path instead, which every x86-64-v3 CPU has.
"""
import sys

import gguf
import numpy as np
from gguf.quants import dequantize

QUANTIZED_OK = {gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16}


def main(src: str, dst: str) -> None:
    reader = gguf.GGUFReader(src)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(dst, arch=arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        val_type = field.types[0]
        sub_type = field.types[-1] if val_type == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        if field.name == gguf.Keys.General.FILE_TYPE:
            value = int(gguf.LlamaFileType.MOSTLY_F16)
        writer.add_key_value(field.name, value, val_type, sub_type=sub_type)
    for t in reader.tensors:
        if t.tensor_type in QUANTIZED_OK:
            data = np.array(t.data)
        else:
            data = dequantize(t.data, t.tensor_type).astype(np.float16)
        writer.add_tensor(t.name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
