## Element-wise arithmetic with broadcasting (codegen.ckernels._elementwise); f: op, ctype,
## floating, shape, a / b / y (each operand's flat index over the loop variables i0, i1, ...).
<%
    wide = "double" if f["floating"] else "int64_t"
    a, b = f"({wide})a[{f['a']}]", f"({wide})b[{f['b']}]"
    sign = {"add": "+", "subtract": "-", "multiply": "*"}.get(f["op"])
    if f["floating"] and sign:
        expr = f"a[{f['a']}] {sign} b[{f['b']}]"
    elif sign:
        expr = f"{a} {sign} {b}"
    else:
        expr = f"{a} {'>' if f['op'] == 'maximum' else '<'} {b} ? {a} : {b}"
%>${loop_nest(f["shape"], f"y[{f['y']}] = ({f['ctype']})({expr});")}
