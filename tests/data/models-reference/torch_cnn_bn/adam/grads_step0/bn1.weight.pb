B
bn1.weightJ «ŸÛ;ÂWÊ:M`\¼ÏQ:ân©;U-º£dí:ó&º