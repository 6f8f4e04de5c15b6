-- DKIM (issue 5): each domain's key pair, made when its selector is set or changed. The private
-- key is sealed with the installation's data key (decisions.md); the public key is what the
-- domain's detail tells the operator to publish.
ALTER TABLE domains ADD COLUMN dkim_key_selector TEXT;
ALTER TABLE domains ADD COLUMN dkim_private_sealed TEXT;
ALTER TABLE domains ADD COLUMN dkim_public_key TEXT;
