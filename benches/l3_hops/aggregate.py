#!/usr/bin/env python3
"""Medians over runs of the per-hop medians printed by prof_l3 (see run.sh)."""
import re,sys,statistics as st,glob
files=sorted(glob.glob(sys.argv[1]))
hops={};order=[];tot=[];ex={};eorder=[];l2={};l2o=[]
for f in files:
    for line in open(f):
        m=re.match(r"HOP\s+(.*?) -> (.*?)\s+n=\s*\d+ med\s+(-?[\d.]+)",line)
        if m:
            k=(m.group(1).strip(),m.group(2).strip())
            if k not in hops: hops[k]=[];order.append(k)
            hops[k].append(float(m.group(3)))
        m=re.match(r"EXTRA\s+(.*?)\s+n=\s*\d+ med\s+(-?[\d.]+)",line)
        if m:
            k=m.group(1).strip(); ex.setdefault(k,[]).append(float(m.group(2)))
            if k not in eorder: eorder.append(k)
        m=re.match(r"L2HOP\s+(.*?) -> (.*?)\s+n=\s*\d+ med\s+(-?[\d.]+)",line)
        if m:
            k=(m.group(1).strip(),m.group(2).strip())
            if k not in l2: l2[k]=[];l2o.append(k)
            l2[k].append(float(m.group(3)))
        m=re.match(r"node_rt_us median ([\d.]+)",line)
        if m: tot.append(float(m.group(1)))
T=st.median(tot); S=sum(st.median(v) for v in hops.values())
print("runs",len(files),"node_rt medians",tot,"median",T,"sum hop",round(S,2))
for k in order:
    v=hops[k]; m=st.median(v)
    print(f"{k[0]:>42} -> {k[1]:<40} {m:6.2f} [{min(v):.2f}-{max(v):.2f}] {100*m/S:5.1f}%")
for k in eorder: print("EXTRA",k,round(st.median(ex[k]),2),[round(x,2) for x in ex[k]])
for k in l2o: print("L2",k,round(st.median(l2[k]),2),[round(x,2) for x in l2[k]])
