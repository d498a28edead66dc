# Makes the hwloc XML topologies of tests/agent/data (--numa-binding's tests):
# lstopo's synthetic machine, plus PCI devices (GPUs) under given packages,
# which synthetic descriptions cannot hold. Run again to regenerate:
#   python3 make_topology_xml.py "pack:2 [numa] l3:2 core:2 pu:2" two_sockets_3_gpus.xml \
#       0:18:10de:0302 0:17:10de:0302 0:03:1a03:0300 1:85:10de:0302
#   python3 make_topology_xml.py "pack:1 [numa] l3:2 core:1 pu:1" two_cpus_2_gpus.xml \
#       0:17:10de:0302 0:18:10de:0302
# Each device is package:bus:vendor:class (10de NVIDIA, 1a03 ASPEED's BMC VGA).
import re, subprocess, sys
# usage: mkxml.py "<synthetic>" out.xml pkg:bus:vendor:class ...
syn, out, gpus = sys.argv[1], sys.argv[2], sys.argv[3:]
subprocess.run(["lstopo-no-graphics", "--input", syn, "--of", "xml", "-f", out], check=True)
lines = open(out).read().split("\n")
# find each Package's closing tag by indentation
res, pkg, depth_indent, gp = [], -1, None, 1000
for ln in lines:
    m = re.match(r'(\s*)<object type="Package"', ln)
    if m:
        pkg += 1; depth_indent = m.group(1)
    if depth_indent is not None and ln == depth_indent + "</object>":
        ind = depth_indent + "  "
        mine = [g for g in gpus if int(g.split(":")[0]) == pkg]
        if mine:
            gp += 1
            res.append(f'{ind}<object type="Bridge" gp_index="{gp}" bridge_type="0-1" depth="0" bridge_pci="0000:[{min(int(g.split(":")[1],16) for g in mine):02x}-{max(int(g.split(":")[1],16) for g in mine):02x}]">')
            for g in mine:
                _, bus, vendor, cls = g.split(":")
                gp += 1
                res.append(f'{ind}  <object type="PCIDev" gp_index="{gp}" pci_busid="0000:{bus}:00.0" pci_type="{cls} [{vendor}:0001] [{vendor}:0001] a1" pci_link_speed="0.000000"/>')
            res.append(f'{ind}</object>')
        depth_indent = None
    res.append(ln)
open(out, "w").write("\n".join(res))
