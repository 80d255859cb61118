## A point-wise kernel: clip, ReLU, requantize, quantized add (codegen.ckernels); f: size,
## row (elements of one NHWC row), channels, channel (k is the channel), statement ({name}:
## each operand's flat index, {y}: the output's), names. With rows: the band y0..y1 - 1, each
## operand's buffer holding rows[name] rows.
<%
    if rows is None:
        index = {name: "i" for name in f["names"]}
        head = f"  for (int i = 0; i < {f['size']}; ++i) {{"
    else:
        index = {name: f"{row('r', rows.get(name, 0))} * {f['row']} + i" for name in f["names"]}
        head = f"  for (int r = y0; r < y1; ++r)\n  for (int i = 0; i < {f['row']}; ++i) {{"
%>${head}
% if f["channel"]:
    const int k = i % ${f["channels"]};
% endif
    ${f["statement"].format(**index)}
  }
