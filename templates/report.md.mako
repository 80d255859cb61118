<%!
def fmt_macs(n):
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return "%.2f %s" % (n / scale, unit)
    return str(n)
%>\
# Compile report: ${report["model"]["name"]} for ${report["target"]["name"]}

- model: `${report["model"]["source"]}` (${report["model"]["format"]}, sha256 `${report["model"]["sha256"][:12]}`)
- target: **${report["target"]["name"]}**\
% if report["target"]["options"]:
 with ${", ".join("%s=%s" % kv for kv in sorted(report["target"]["options"].items()))}\
% endif

- host CPU: `${report["host"]["cpu"]}`, CPU schedules: ${"on" if report["host"]["schedules"] else "off"}
- inputs: ${", ".join("`%s` %s %s" % (i["name"], i["dtype"], i["shape"]) for i in report["inputs"])}
- outputs: ${", ".join("`%s` %s %s" % (o["name"], o["dtype"], o["shape"]) for o in report["outputs"])}

## Summary

| | operators | MACs |
| --- | ---: | ---: |
| total | ${report["summary"]["operators"]} | ${fmt_macs(report["summary"]["macs"])} |
| offloaded | ${report["summary"]["offloaded_operators"]} | ${fmt_macs(report["summary"]["offloaded_macs"])} |
| offload ratio | ${"%.1f %%" % (100 * report["summary"]["node_offload_ratio"])} | ${"%.1f %%" % (100 * report["summary"]["mac_offload_ratio"])} |

${report["summary"]["note"]}

## Stages

| stage | seconds |
| --- | ---: |
% for stage in report["stages"]:
| ${stage["name"]} | ${"%.2f" % stage["seconds"]} |
% endfor

## Operators

| # | operator | output shape | MACs | runs on | why |
| ---: | --- | --- | ---: | --- | --- |
% for op in report["operators"]:
| ${op["index"]} | `${op["op"]}` | ${op["shape"]} | ${fmt_macs(op["macs"])} | ${op["module"]} | ${op["reason"]} |
% endfor
